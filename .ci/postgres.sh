# Sourced by .ci/provision (.ci/run and make deps): makes a PostgreSQL server reachable for the tests of the
# effectively-once toolkit (inbox, outbox, reconcile, CampusCafe) and exports
# OKIBA_TEST_POSTGRES_URL. On a fresh Debian machine, as root, with no services running:
# installs Debian's postgresql package if it is missing, creates a cluster of its own
# (owned by the postgres user, listening on 127.0.0.1 only), starts it, creates a user
# and a database for the tests, and stops the server when .ci/run exits (unless
# OKIBA_CI_PG_KEEP=1: make deps leaves it running). A second run reuses the package and the
# cluster, so it takes a second or two. The URL is the one internal/dbtest tries by default.
#
# Settings (environment): OKIBA_CI_PG_PORT (default 54329), OKIBA_CI_PG_DIR (default
# /var/tmp/okiba-ci-postgres). A URL already in OKIBA_TEST_POSTGRES_URL is used as it is.

okiba_ci_postgres() {
	if [ -n "${OKIBA_TEST_POSTGRES_URL:-}" ]; then
		echo "postgres: using OKIBA_TEST_POSTGRES_URL from the environment"
		return 0
	fi
	local port="${OKIBA_CI_PG_PORT:-54329}"
	local dir="${OKIBA_CI_PG_DIR:-/var/tmp/okiba-ci-postgres}"
	local as=()
	if [ "$(id -u)" = 0 ]; then
		as=(runuser -u postgres --)
	fi

	if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
		if [ "$(id -u)" != 0 ]; then
			echo "postgres: not installed, and installing it needs root (apt-get install postgresql)" >&2
			return 1
		fi
		echo "postgres: installing Debian's postgresql package"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		# The package's own cluster is not needed: ours is started below.
		apt-get install -y -qq --no-install-recommends postgresql >/dev/null
	fi
	local bin
	bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)

	if [ ! -s "$dir/PG_VERSION" ]; then
		echo "postgres: creating a cluster in $dir"
		rm -rf "$dir"
		mkdir -p "$dir"
		if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
		chmod 700 "$dir"
		"${as[@]}" "$bin/initdb" -D "$dir" -A trust -U postgres -E UTF8 --no-locale >/dev/null
	fi
	if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
		echo "postgres: already running on 127.0.0.1:$port"
	else
		echo "postgres: starting on 127.0.0.1:$port"
		# Sockets in the data directory: /var/run/postgresql may not exist without the
		# package's service.
		"${as[@]}" "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off" start >/dev/null || {
			cat "$dir/server.log" >&2
			return 1
		}
		if [ "${OKIBA_CI_PG_KEEP:-}" = 1 ]; then
			echo "postgres: left running; stop it with: ${as[*]} $bin/pg_ctl -D $dir -m fast stop"
		else
			OKIBA_CI_PG_STOP="${as[*]} $bin/pg_ctl -D $dir -m fast stop"
			trap 'echo "postgres: stopping"; $OKIBA_CI_PG_STOP >/dev/null' EXIT
		fi
	fi
	local psql=("$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA)
	if [ "$("${psql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname = 'okiba'")" != 1 ]; then
		"${psql[@]}" -c "CREATE ROLE okiba LOGIN PASSWORD 'okiba'"
	fi
	if [ "$("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = 'okiba_test'")" != 1 ]; then
		"${psql[@]}" -c "CREATE DATABASE okiba_test OWNER okiba"
	fi
	export OKIBA_TEST_POSTGRES_URL="postgres://okiba:okiba@127.0.0.1:$port/okiba_test?sslmode=disable"
	echo "postgres: OKIBA_TEST_POSTGRES_URL=$OKIBA_TEST_POSTGRES_URL"
}
okiba_ci_postgres
