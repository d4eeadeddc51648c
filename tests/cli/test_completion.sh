#!/usr/bin/env bash
# gpufrac completion (issue 30 item 12): the bash script, sourced in a
# bash that runs its completion function as bash's programmable completion
# would (COMP_WORDS, COMP_CWORD), completes commands from `gpufrac help` and
# each command's options from its --help, so a new option needs no edit;
# the zsh script is the same function under bashcompinit; usage errors.
set -u
. "$(dirname "$0")/check.sh"
dir=$(cd "$(dirname "$GPUFRAC")" && pwd)

check "completion --help" 0 '^usage: gpufrac completion bash\|zsh' -- "$GPUFRAC" completion --help
check "no shell" 2 'which shell: bash or zsh' -- "$GPUFRAC" completion
check "fish" 2 "shell 'fish': bash or zsh" -- "$GPUFRAC" completion fish
check "two shells" 2 "unexpected argument 'zsh'" -- "$GPUFRAC" completion bash zsh
check "zsh: bashcompinit" 0 '^autoload -U \+X bashcompinit && bashcompinit$' -- "$GPUFRAC" completion zsh
check "zsh: the function" 0 '^complete -F _gpufrac gpufrac$' -- "$GPUFRAC" completion zsh

# comp WORD... : what the completion function offers for the last word
cat >"$tmp/drive.sh" <<'EOS'
set -eu
source <(gpufrac completion bash)
complete -p gpufrac
comp() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _gpufrac;
         echo "[$*] ${COMPREPLY[*]}"; }
comp gpufrac do
comp gpufrac ""
comp gpufrac doctor --st
comp gpufrac plan --
comp gpufrac completion ""
comp gpufrac kubectl wh
comp gpufrac help sch
EOS
check "sourced in bash" 0 '^complete -F _gpufrac gpufrac$' -- \
  env PATH="$dir:$PATH" bash "$tmp/drive.sh"
out=$(cat "$tmp/out")
want() {
  if grep -qxF -- "$1" <<<"$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: completion: want line '$1' in:"
    echo "$out"
  fi
}
want "[gpufrac do] doctor"
want "[gpufrac ] simulate run inspect scheduler node cache plan kubectl doctor completion version help"
want "[gpufrac doctor --st] --stuck-after"
want "[gpufrac completion ] bash zsh"
want "[gpufrac kubectl wh] why-pending"
want "[gpufrac help sch] scheduler"
# plan's options as its --help lists them, --prometheus among them
for o in --prometheus --window --node-types --snapshot; do
  if grep -q -- "^\[gpufrac plan --\] .*$o\( \|$\)" <<<"$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: completion: plan -- lacks $o: $out"
  fi
done

echo "completion: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
