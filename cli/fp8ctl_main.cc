// fp8ctl: the fp8rt command line. See cli/fp8ctl.h and README.md.
#include <iostream>

#include "cli/fp8ctl.h"

int main(int argc, char** argv) { return fp8rt::fp8ctl::Main(argc, argv, std::cout, std::cerr); }
