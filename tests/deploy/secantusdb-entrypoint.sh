#!/bin/sh
# Start SecantusDB as the official mongo image starts mongod: on the first start (no marker in /data/db)
# create the root user from MONGO_INITDB_ROOT_USERNAME / MONGO_INITDB_ROOT_PASSWORD on a loopback-only
# server on port 27018 (so the healthcheck does not pass yet), then serve on 0.0.0.0:27017 with
# authentication required. Arguments go to secantusd-py (as mongod's do in the official image).
set -eu
DATA=/data/db
MARKER="$DATA/.paiq-root-user-created"

if [ -n "${MONGO_INITDB_ROOT_USERNAME:-}" ] && [ ! -e "$MARKER" ]; then
  : "${MONGO_INITDB_ROOT_PASSWORD:?MONGO_INITDB_ROOT_PASSWORD must be set with MONGO_INITDB_ROOT_USERNAME}"
  secantusd-py --host 127.0.0.1 --port 27018 --storage-path "$DATA" &
  init_pid=$!
  python - <<'PY'
import os
import pymongo
client = pymongo.MongoClient("mongodb://127.0.0.1:27018/?directConnection=true", serverSelectionTimeoutMS=30000)
client.admin.command("ping")
client.admin.command("createUser", os.environ["MONGO_INITDB_ROOT_USERNAME"],
                     pwd=os.environ["MONGO_INITDB_ROOT_PASSWORD"], roles=[{"role": "root", "db": "admin"}])
print("secantusdb-entrypoint: root user created", flush=True)
PY
  kill "$init_pid"
  wait "$init_pid" || true
  touch "$MARKER"
fi
if [ -e "$MARKER" ]; then
  exec secantusd-py --host 0.0.0.0 --port 27017 --storage-path "$DATA" --auth "$@"
fi
exec secantusd-py --host 0.0.0.0 --port 27017 --storage-path "$DATA" "$@"
