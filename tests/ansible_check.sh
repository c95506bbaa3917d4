#!/usr/bin/env bash
# The quality gates of ansible/ (issue [6 of 9]): ansible-lint at the production profile, offline
# (ansible/.ansible-lint), `ansible-playbook --syntax-check` of site.yml and rolling-upgrade.yml
# against inventory.example.ini, and a row in ansible/README.md for every role default.
# Exit 0: all pass; 1: one failed (its output above); 77: ansible-lint or ansible-playbook missing.
set -uo pipefail
cd "$(dirname "$0")/../ansible" || { echo "ansible_check: no ansible/ directory"; exit 1; }

for tool in ansible-lint ansible-playbook; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "ansible_check: $tool is not installed (apt-get install ansible ansible-lint): skipped"
    exit 77
  fi
done

export ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 NO_COLOR=1
rc=0
step() {  # name command...: runs it, reports, remembers a failure
  local name=$1; shift
  echo "ansible_check: $name: $*"
  if "$@"; then
    echo "ansible_check: $name: ok"
  else
    echo "ansible_check: $name: FAILED"
    rc=1
  fi
}

step lint ansible-lint --offline --nocolor
for playbook in site.yml rolling-upgrade.yml; do
  step "syntax $playbook" ansible-playbook --syntax-check -i inventory.example.ini "$playbook"
done

# Every variable a role defaults must have its row in the README's tables.
documented() {
  python3 - <<'PY'
import glob, re, sys, yaml
readme = open("README.md").read()
missing = []
for path in sorted(glob.glob("roles/*/defaults/main.yml")):
    for name in (yaml.safe_load(open(path)) or {}):
        if not re.search(r"^\| `%s` \|" % re.escape(name), readme, re.M):
            missing.append(f"{name} ({path})")
for m in missing:
    print(f"ansible_check: README.md has no row for {m}")
sys.exit(1 if missing else 0)
PY
}
step "variables documented" documented

[ $rc -eq 0 ] && echo "ansible_check: PASS" || echo "ansible_check: FAIL"
exit $rc
