#!/bin/sh
# Make a cluster's credentials once (README "Security model"), with quorate gen:
#
#   credentials.sh DIR ID[=HOST,HOST...]...
#
# DIR gets what every node reads: ca.crt, <ID>.crt and <ID>.key per node
# (SANs: the HOSTs, default ID), tokens and gossip.keyring; the CA key in
# DIR/ca/ (only to sign more nodes: keep it away from the nodes) and a plain
# token per client role in DIR/clients/<role>.token. A DIR that already
# holds a complete set is kept as it is, so a restart never rotates
# anything; a set cut short is made again. $QUORATE is the binary
# (default: quorate on PATH).
set -eu

usage() {
	echo "usage: $0 DIR ID[=HOST,HOST...]..." >&2
	exit 2
}
[ $# -ge 2 ] || usage
dir=$1
shift
quorate=${QUORATE:-quorate}

if [ -f "$dir/.complete" ]; then
	echo "credentials: $dir already holds a complete set; kept"
	exit 0
fi

# Everything is made in .partial and moved into place at the end, so a run
# cut short leaves no set that looks complete.
tmp=$dir/.partial
rm -rf "$tmp"
mkdir -p "$tmp/ca" "$tmp/clients"
umask 077

"$quorate" gen ca --out "$tmp/ca" >/dev/null
cp "$tmp/ca/ca.crt" "$tmp/ca.crt"
for node in "$@"; do
	id=${node%%=*}
	hosts=$id
	case $node in *=*) hosts=${node#*=} ;; esac
	[ -n "$id" ] && [ -n "$hosts" ] || usage
	"$quorate" gen node --ca-cert "$tmp/ca/ca.crt" --ca-key "$tmp/ca/ca.key" \
		--id "$id" --hosts "$hosts" --out "$tmp" >/dev/null
done

"$quorate" gen gossip-key >"$tmp/gossip.keyring"

# quorate gen token prints four lines: a comment, the token, a comment and
# the tokens-file line.
echo "# quorate tokens: <name> <scopes> <sha256 of the token>; the plain tokens are in clients/" >"$tmp/tokens"
for role in operator:check,read,admin app:check prometheus:read gateway:check,lease; do
	name=${role%%:*}
	out=$("$quorate" gen token --name "$name" --scopes "${role#*:}")
	echo "$out" | sed -n 2p >"$tmp/clients/$name.token"
	echo "$out" | sed -n 4p >>"$tmp/tokens"
done

mkdir -p "$dir/ca" "$dir/clients"
for f in "$tmp"/ca/* "$tmp"/clients/*; do
	mv "$f" "$dir/${f#"$tmp"/}"
done
for f in "$tmp"/*; do
	[ -f "$f" ] && mv "$f" "$dir/"
done
rm -rf "$tmp"
touch "$dir/.complete"
echo "credentials: made in $dir for $*"
