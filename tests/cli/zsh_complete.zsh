# Completes command lines in a real interactive zsh (under zsh/zpty) with
# the completion function found in FPATH_DIR, and prints the words each
# completion offers (every compadd call), one per line, "--" after each.
#   zsh -f zsh_complete.zsh FPATH_DIR WORK_DIR LINE...
# WORK_DIR receives the shell's record file. Waits for each completion by
# watching that file (at most 30 s each), never by a fixed delay.
zmodload zsh/zpty
dir=$1 work=$2
shift 2
out=$work/zsh-complete.out
: >$out
zpty z zsh -f -i
zpty -w z "PS1='> '; fpath=(${(q)dir} \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z 'comptest() { compadd() { builtin compadd "$@"; local -a w; builtin compadd -O w "$@"; print -rl -- $w >>'${(q)out}'; }; _main_complete "$@"; unfunction compadd; print -r -- -- >>'${(q)out}'; }'
zpty -w z 'zle -C complete-test complete-word comptest; bindkey "^T" complete-test'
zpty -w z "print -r -- -- >>${(q)out}"

wait_for() {  # $1 markers in the record file
  local i
  for i in {1..300}; do
    (( $(grep -c -x -- -- $out) >= $1 )) && return 0
    sleep 0.1
  done
  print -u2 "zsh_complete: no completion after 30 s"
  return 1
}
wait_for 1 || exit 1
n=1
for line in "$@"; do
  zpty -w -n z "$line"$'\x14\x15'
  (( n++ ))
  wait_for $n || { zpty -d z; exit 1; }
done
zpty -d z
sed 1d $out
