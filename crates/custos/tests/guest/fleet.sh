#!/bin/sh
# Guest side of tests/fleet.rs's two-machine test: this VM is the second
# machine of the fleet, on a host-only network (a TAP device, no NAT).
# Usage: fleet.sh BIN_DIR OUT GUEST_IP SERVER_IP SERVER_PORT BROKER TOPIC.
# It records (host id "vm", into the host's Kafka) a client that reads
# OUT/vm-secret and sends it to the host's server. Every result is a
# "key value" line on stdout; the collector's log goes to OUT.
PATH=$PATH:/usr/sbin:/sbin
B=$1; OUT=$2; GUEST_IP=$3; SERVER_IP=$4; SERVER_PORT=$5; BROKER=$6; TOPIC=$7
NIC=$(ls /sys/class/net | grep -v '^lo$' | head -n 1)
echo "nic $NIC"
ip link set lo up
ip addr add "$GUEST_IP/24" dev "$NIC" && ip link set "$NIC" up
echo "net.rc $?"
echo "a secret of the vm's" > "$OUT/vm-secret"
"$B/custos" collect --kafka "$BROKER" --topic "$TOPIC" --host-id vm --force -o "$OUT/vm.jsonl" -- python3 -c '
import socket, sys, time
data = open(sys.argv[1], "rb").read()
for attempt in range(60):  # the link may take a moment to come up
    try:
        s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=10)
        break
    except OSError:
        time.sleep(1)
else:
    sys.exit("no connection to the server")
s.sendall(data)
s.close()
' "$OUT/vm-secret" "$SERVER_IP" "$SERVER_PORT" 2> "$OUT/vm-collect.log"
echo "collect.rc $?"
echo "done yes"
