#!/bin/bash
# with-services.sh - run a command with a throwaway PostgreSQL 15 server.
#
#   scripts/with-services.sh .venv/bin/pytest tests/service -q
#
# Creates a cluster in a temp dir (initdb as user postgres when run as root), listens on
# 127.0.0.1 on a free port, creates database "apportion", exports APPORTION_TEST_PG_URL,
# runs "$@", then stops the server and removes the temp dir. Exits with the command's code.
set -euo pipefail

PG_BIN="${PG_BIN:-}"
if [ -z "$PG_BIN" ]; then
    for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
        if [ -x "$d/initdb" ]; then PG_BIN="$d"; break; fi
    done
fi
if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ]; then
    echo "with-services: PostgreSQL not found (run scripts/install-system.sh as root)" >&2
    exit 2
fi
if [ $# -eq 0 ]; then
    echo "usage: scripts/with-services.sh COMMAND [ARGS...]" >&2
    exit 2
fi

# as root, the server must run as an unprivileged user; otherwise as ourselves
if [ "$(id -u)" -eq 0 ]; then
    as_pg() { runuser -u postgres -- "$@"; }
    PG_USER=postgres
else
    as_pg() { "$@"; }
    PG_USER="$(id -un)"
fi

TMP="$(mktemp -d -t apportion-pg.XXXXXX)"
chmod 755 "$TMP"
[ "$(id -u)" -eq 0 ] && chown "$PG_USER" "$TMP"
DATA="$TMP/data"
started=0
cleanup() {
    if [ "$started" -eq 1 ]; then
        as_pg "$PG_BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

as_pg "$PG_BIN/initdb" -D "$DATA" -U "$PG_USER" -A trust -E UTF8 --no-locale >"$TMP/initdb.log" 2>&1 \
    || { cat "$TMP/initdb.log" >&2; exit 2; }
# fsync off: a throwaway test server, durability is not what is tested here
as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$TMP/server.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $PORT -k $TMP -c fsync=off -c full_page_writes=off" start >/dev/null \
    || { cat "$TMP/server.log" >&2; exit 2; }
started=1
as_pg "$PG_BIN/createdb" -h 127.0.0.1 -p "$PORT" -U "$PG_USER" apportion

export APPORTION_TEST_PG_URL="postgresql+psycopg://$PG_USER@127.0.0.1:$PORT/apportion"
echo "with-services: PostgreSQL on 127.0.0.1:$PORT ($APPORTION_TEST_PG_URL)" >&2

set +e
"$@"
rc=$?
set -e
exit $rc
