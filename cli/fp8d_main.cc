// fp8d: the fp8rt daemon. See cli/fp8d.h and README.md.
#include "cli/fp8d.h"

int main(int argc, char** argv) { return fp8rt::fp8d::Main(argc, argv); }
