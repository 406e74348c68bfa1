#!/bin/sh
# Make the credentials of a quorate StatefulSet and store them as Secrets
# (deploy/README.md, "Kubernetes"):
#
#   make-secret.sh NAMESPACE [NODES] [DIR]
#
# Certificates are made for ordinals 0..NODES-1 (default 5: room to scale up
# to five), each valid for its pod's names under the headless Service and for
# the client Service's, in namespace NAMESPACE of cluster domain
# $CLUSTER_DOMAIN (default cluster.local). DIR (default ./quorate-credentials)
# keeps everything, the CA key and the client tokens included: store it
# safely. Two Secrets are created: quorate-credentials, what the nodes mount
# (no CA key, no plain token), and quorate-prometheus-token, the read token
# for scraping /metrics. $QUORATE and $KUBECTL name the binaries.
set -eu

[ $# -ge 1 ] || { echo "usage: $0 NAMESPACE [NODES] [DIR]" >&2; exit 2; }
ns=$1
nodes=${2:-5}
dir=${3:-./quorate-credentials}
case $dir in *" "*) echo "$0: DIR must not contain spaces" >&2; exit 2 ;; esac
domain=${CLUSTER_DOMAIN:-cluster.local}
kubectl=${KUBECTL:-kubectl}
here=$(dirname "$0")

svc="quorate,quorate.$ns,quorate.$ns.svc,quorate.$ns.svc.$domain"
set --
i=0
while [ "$i" -lt "$nodes" ]; do
	pod=quorate-$i
	set -- "$@" "$pod=$pod.quorate-peer.$ns.svc.$domain,$pod.quorate-peer.$ns.svc,$pod.quorate-peer,$svc,localhost,127.0.0.1"
	i=$((i + 1))
done
sh "$here/../credentials.sh" "$dir" "$@"

files="--from-file=$dir/ca.crt --from-file=$dir/tokens --from-file=$dir/gossip.keyring"
i=0
while [ "$i" -lt "$nodes" ]; do
	files="$files --from-file=$dir/quorate-$i.crt --from-file=$dir/quorate-$i.key"
	i=$((i + 1))
done
# shellcheck disable=SC2086 # $files is a list of flags without spaces
"$kubectl" create secret generic quorate-credentials --namespace "$ns" $files
"$kubectl" create secret generic quorate-prometheus-token --namespace "$ns" --from-file=token="$dir/clients/prometheus.token"
