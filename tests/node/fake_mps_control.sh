#!/bin/sh
# A fake nvidia-cuda-mps-control for the node agent's MPS tests.
#   -f       the daemon in the foreground: records its environment in
#            $CUDA_MPS_PIPE_DIRECTORY/daemon.env, marks itself running, and
#            waits for a quit (or exits at once with FAKE_MPS_EXIT's code).
#   (none)   a control client: appends stdin's commands to
#            $CUDA_MPS_PIPE_DIRECTORY/commands; "quit" stops the daemon.
#            Without a running daemon it fails like the real one.
pipe=${CUDA_MPS_PIPE_DIRECTORY:?no CUDA_MPS_PIPE_DIRECTORY}
if [ "${1:-}" = "-f" ]; then
  if [ -n "${FAKE_MPS_EXIT:-}" ]; then exit "$FAKE_MPS_EXIT"; fi
  env | grep -E '^(CUDA_VISIBLE_DEVICES|CUDA_MPS_LOG_DIRECTORY)=' | sort >"$pipe/daemon.env"
  echo $$ >"$pipe/running"
  echo start >>"$pipe/starts"
  while [ ! -e "$pipe/quit" ]; do sleep 0.05; done
  rm -f "$pipe/quit" "$pipe/running"
  exit 0
fi
[ -e "$pipe/running" ] || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
while read -r cmd; do
  echo "$cmd" >>"$pipe/commands"
  [ "$cmd" = quit ] && touch "$pipe/quit"
done
exit 0
