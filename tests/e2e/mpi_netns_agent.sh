#!/bin/sh
# mpirun's launch agent (--mca plm_rsh_agent) for hosts that are network namespaces of this
# machine, in place of ssh. ORTE's rsh launcher runs "<agent> <host> <command...>" to start its
# daemon (orted) on each host other than mpirun's own; here the host is an address that
# XROCE_MPI_NETNS maps to a namespace ("198.18.7.2=ns-b 198.18.7.1=ns-a"), and the command runs
# in that namespace inside `xroce exec` ($XROCE_BIN), so the ranks orted starts there see that
# namespace's xroce devices. As ssh does, the words are joined and run by a shell. orted then
# connects back to mpirun over TCP between the namespaces.
set -eu
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # options an ssh-like agent gets
host=$1
shift
ns=
for pair in ${XROCE_MPI_NETNS:-}; do
  [ "${pair%%=*}" = "$host" ] && ns=${pair#*=}
done
if [ -z "$ns" ]; then
  echo "mpi_netns_agent: no namespace for host '$host' in XROCE_MPI_NETNS" >&2
  exit 1
fi
exec ip netns exec "$ns" "$XROCE_BIN" exec -- sh -c "$*"
