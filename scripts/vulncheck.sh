#!/usr/bin/env bash
# make verify's vulnerability step: govulncheck against DB (a URL, or the
# offline copy the Makefile builds from the pinned golang.org/x/vulndb
# module, because vuln.go.dev is out of reach on the project's machines and
# CI). Called vulnerabilities in a required module fail: a newer version of
# the module fixes them. Called vulnerabilities in the standard library are
# printed as a warning: the fix is a newer Go toolchain, and the machines
# run the one they come with.
set -uo pipefail
govulncheck=$1 db=$2
out=$("$govulncheck" -db "$db" ./... 2>&1)
rc=$?
case $rc in
0) echo "govulncheck: no called vulnerabilities ($db)"; exit 0 ;;
3) ;; # findings: sorted below
*) echo "$out"; echo "govulncheck: failed (exit $rc) with database $db"; exit "$rc" ;;
esac
mods=$(grep -oE 'Found in: [^ ]+@v[^ ]*' <<<"$out" | sort -u)
std=$(grep -cE '^Vulnerability #' <<<"$out")
std_fixed=$(grep -oE 'Fixed in: [^ ]+@go[0-9.]+' <<<"$out" | sed 's/.*@//' | sort -uV | tail -1)
if [ -n "$mods" ]; then
  echo "$out"
  echo "govulncheck: FAIL: required modules with called vulnerabilities (upgrade them):"
  echo "$mods"
  exit 1
fi
echo "govulncheck: WARNING: $std called vulnerabilities in the standard library of $(go env GOVERSION), fixed by $std_fixed; not fatal (the Go toolchain is the machine's). Details: $govulncheck -db $db ./..."
