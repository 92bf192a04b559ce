#!/usr/bin/env bash
# Installs what the side-by-side benchmark needs beyond Go: Debian's redis-server,
# rabbitmq-server and postgresql (apt-get, as root), and nats-server v2.15.2 into
# bench/.tools/bin (go install; never committed). Idempotent: a second run only checks.
# The packages' own services are not started (a policy-rc.d denies it during the
# install, if the machine has none); the harness starts its own servers on free
# loopback ports, under its run directory, and stops them.
set -euo pipefail
cd "$(dirname "$0")"

NATS_VERSION=v2.15.2
need=()
command -v redis-server >/dev/null || need+=(redis-server)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
if ((${#need[@]})); then
	if [ "$(id -u)" != 0 ]; then
		echo "bench-setup: need root to apt-get install ${need[*]}" >&2
		exit 1
	fi
	echo "bench-setup: installing ${need[*]} from Debian"
	export DEBIAN_FRONTEND=noninteractive
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p .tools/bin
if ! .tools/bin/nats-server --version 2>/dev/null | grep -q "${NATS_VERSION#v}"; then
	echo "bench-setup: go install github.com/nats-io/nats-server/v2@$NATS_VERSION"
	GOBIN="$PWD/.tools/bin" GOFLAGS= go install "github.com/nats-io/nats-server/v2@$NATS_VERSION"
fi
echo "bench-setup: redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), rabbitmq $(dpkg-query -W -f='${Version}' rabbitmq-server), postgresql $(dpkg-query -W -f='${Version}' postgresql), $(.tools/bin/nats-server --version)"
