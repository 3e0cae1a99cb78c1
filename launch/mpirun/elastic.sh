# shellcheck shell=bash
# Elastic continuation for launch/mpirun/moco.sh (sourced by it, with --max-restarts N or --min-ranks
# M): after a failed job, which hosts still answer, how many ranks to start again on them, from
# which checkpoint, and the record of it (a line on the terminal, a {"event":"restart"} row in the
# run's metrics.jsonl). Uses moco.sh's variables: binary, config, extra, hostfile, ranks,
# max_restarts, min_ranks, stop_asked; sets world, hosts_now and job_args for the next start.

# A string, and a list of strings, as JSON.
json_str() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
json_list() { local out='' item one; for item in "$@"; do one=$(json_str "$item"); out+="${out:+,}$one"; done; printf '[%s]' "$out"; }

# SECTION KEY: its value in the effective config moco_dist printed (cfg), unquoted.
config_value() {
  awk -v s="$1:" -v k="$2:" '$0 == s {t = 1; next} /^[^ ]/ {t = 0}
    t && $1 == k {
      sub("^ *" k " ", "")
      if ($0 ~ /^".*"$/) { $0 = substr($0, 2, length($0) - 2); gsub(/\\"/, "\""); gsub(/\\\\/, "\\") }
      print; exit }' <<<"$cfg"
}

# The command that asks a host whether it answers: mpirun's launch agent (what --mca plm_rsh_agent in
# MOCO_MPIRUN_ARGS or OMPI_MCA_plm_rsh_agent names, else Open MPI's default "ssh : rsh"), the first
# of its alternatives found. ssh gets BatchMode (no password prompt) and a connect timeout.
find_probe_agent() {
  local words agent=${OMPI_MCA_plm_rsh_agent:-} i alts alt
  read -r -a words <<<"${MOCO_MPIRUN_ARGS:-}"
  for ((i = 0; i + 2 < ${#words[@]}; i++)); do
    [[ ${words[i]} == -mca || ${words[i]} == --mca ]] && [ "${words[i + 1]}" = plm_rsh_agent ] && agent=${words[i + 2]}
  done
  IFS=: read -r -a alts <<<"${agent:-ssh : rsh}"
  for alt in "${alts[@]}"; do
    read -r -a probe_agent <<<"$alt"
    [ ${#probe_agent[@]} -gt 0 ] && command -v "${probe_agent[0]}" >/dev/null || continue
    [ "${probe_agent[0]##*/}" != ssh ] || probe_agent+=(-o BatchMode=yes -o ConnectTimeout="$probe_s")
    return 0
  done
  echo "moco.sh: --max-restarts: no launch agent to probe the hosts with (${agent:-ssh : rsh} not found)" >&2
  exit 2
}

elastic_setup() {  # ARGS...: the command line's key=value overrides
  [ "$min_ranks" -le "$ranks" ] ||
    { echo "moco.sh: --min-ranks $min_ranks is more than the $ranks rank(s) the job starts with" >&2; exit 2; }
  [ "$max_restarts" -gt 0 ] || return 0
  user_args=("$@") restarts=0 probe_s=${MOCO_MPIRUN_PROBE_S:-15}
  if [ -n "$hostfile" ]; then
    # The world after a host is dropped is what the slots of the hosts left hold.
    local line
    line=$(grep -vE '^[[:space:]]*(#|$)' "$hostfile" | grep -vE '(^|[[:space:]])slots=[0-9]+' | head -n 1 || true)
    [ -z "$line" ] ||
      { echo "moco.sh: --hostfile '$hostfile': '$line' gives no slots=N, which --max-restarts needs to size the world after a host is lost" >&2; exit 2; }
    find_probe_agent
  fi
  ckpt_tool=${MOCO_CKPT:-}
  [ -n "$ckpt_tool" ] || { ckpt_tool=$(dirname "$binary"); ckpt_tool+=/moco_ckpt; }
  [ -x "$ckpt_tool" ] || ckpt_tool=$(command -v moco_ckpt || true)
  [ -n "$ckpt_tool" ] ||
    { echo "moco.sh: --max-restarts: no moco_ckpt (beside $binary, on PATH, or MOCO_CKPT) to verify checkpoints with" >&2; exit 2; }
  if ! cfg=$("$binary" --config "$config" "${extra[@]}" "$@" --print-config 2>&1); then
    printf '%s\n' "$cfg" >&2  # moco_dist's own words for what is wrong
    echo "moco.sh: the config does not load: $binary --config $config ${extra[*]} $* --print-config" >&2
    exit 2
  fi
  out_dir=$(config_value train output_dir) batch=$(config_value optim batch_size)
  bn_splits=$(config_value moco bn_splits)
  # Shuffle-BN computes the same for every world that divides moco.bn_splits (a key of the methods
  # that shuffle; the config holds no other method's keys): a restart keeps to such a world where
  # the run had one.
  bn_exact=0
  [ -z "$bn_splits" ] || [ $((bn_splits % ranks)) -ne 0 ] || bn_exact=1
  elastic_tmp=$(mktemp -d "${TMPDIR:-/tmp}/moco_sh.XXXXXX")
  trap 'rm -rf "$elastic_tmp"' EXIT
  metrics=$out_dir/metrics.jsonl
  metrics_mark=$(stat -c %s "$metrics" 2>/dev/null || echo 0)
}

# The ranks stopped on a signal sent to them (not to this script), with a checkpoint: metrics.jsonl
# got a "preempted" row since the job started. A clean stop, not a failure.
ranks_stopped_cleanly() {
  local size
  size=$(stat -c %s "$metrics" 2>/dev/null || echo 0)
  [ "$size" -ge "$metrics_mark" ] || metrics_mark=0  # started afresh: moco_dist set the old file aside
  tail -c +$((metrics_mark + 1)) "$metrics" 2>/dev/null | grep -q '"event":"preempted"'
}

# Whether a job that failed with exit RC starts again; if not, says why.
restart_allowed() {
  if [ -n "$stop_asked" ]; then
    echo "[moco.sh] the job was asked to stop (SIG$stop_asked): not restarted" >&2
  elif ranks_stopped_cleanly; then
    echo "[moco.sh] the ranks stopped on a signal with a checkpoint: not restarted" >&2
  elif [ "$1" -eq 2 ]; then
    echo "[moco.sh] moco_dist refused to run (exit 2): a restart would be refused alike; not restarted" >&2
  elif [ "$restarts" -ge "$max_restarts" ]; then
    echo "[moco.sh] the job failed (exit $1) and no restart is left ($restarts of $max_restarts used): stopping" >&2
  else
    return 0
  fi
  return 1
}

# HOST answers the launch agent within probe_s seconds (this machine always does).
answers() {
  local names
  names=$(hostname; hostname -s; hostname -I 2>/dev/null || true)
  names=" localhost 127.0.0.1 ${names//$'\n'/ } "
  case $names in *" $1 "*) return 0 ;; esac
  timeout -k 2 "$probe_s" "${probe_agent[@]}" "$1" true </dev/null >/dev/null 2>&1
}

# Every host of hosts_now probed at once: sets kept_lines (their hostfile lines), kept, dropped and
# capacity (the slots of the hosts kept). Without a hostfile, this machine with the world it had.
probe_hosts() {
  local line host pids=() lines=() hosts=() i slots
  kept_lines=() kept=() dropped=() capacity=0
  if [ -z "$hosts_now" ]; then kept=("$HOSTNAME") capacity=$world; return 0; fi
  local count
  count=$(grep -cvE '^[[:space:]]*(#|$)' "$hosts_now")
  echo "[moco.sh] probing $count host(s) with ${probe_agent[*]} (${probe_s} s at most)" >&2
  while IFS= read -r line; do
    [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
    read -r host _ <<<"$line"
    lines+=("$line") hosts+=("$host")
    answers "$host" &
    pids+=($!)
  done <"$hosts_now"
  for i in "${!hosts[@]}"; do
    if wait "${pids[i]}"; then
      kept_lines+=("${lines[i]}") kept+=("${hosts[i]}")
      slots=$(awk '{for (i = 1; i <= NF; i++) if ($i ~ /^slots=/) {sub("slots=", "", $i); print $i + 0}}' <<<"${lines[i]}")
      capacity=$((capacity + slots))
    else
      dropped+=("${hosts[i]}")
    fi
  done
}

# CAP: the largest world of at most CAP ranks that divides the global batch (and moco.bn_splits
# where it must); 0 if none.
largest_world() {
  local w
  for ((w = $1; w >= 1; w--)); do
    [ $((batch % w)) -eq 0 ] || continue
    [ "$bn_exact" -eq 0 ] || [ $((bn_splits % w)) -eq 0 ] || continue
    echo "$w"
    return 0
  done
  echo 0
}

# The newest committed checkpoint of the run that `moco_ckpt verify` passes; nothing if none does.
verified_checkpoint() {
  local dir why
  while IFS= read -r dir; do
    if "$ckpt_tool" verify "$dir" >/dev/null 2>"$elastic_tmp/verify.err"; then
      echo "$dir"
      return 0
    fi
    why=$(tail -n 1 "$elastic_tmp/verify.err")
    echo "[moco.sh] $dir does not verify, skipped: $why" >&2
  done < <(find "$out_dir/checkpoints" -mindepth 1 -maxdepth 1 -type d -name 'step_*' 2>/dev/null |
    grep -E '/step_[0-9]+$' | sort -V -r)
}

# RC OLD_WORLD STEP CHECKPOINT SECONDS (probing and verifying): the restart said on the terminal and appended to metrics.jsonl
# (after a newline, should a killed rank 0 have cut its last row short).
log_restart() {
  local from="step $3 (${4}, verified)"
  [ -n "$4" ] || from="the start (no checkpoint verifies)"
  echo "[moco.sh] restart $restarts of $max_restarts after exit $1: ${dropped[*]:-no host} dropped; $world rank(s) on ${kept[*]} (were $2), from $from" >&2
  mkdir -p "$out_dir"
  local last='' dropped_json kept_json checkpoint_json
  [ ! -s "$metrics" ] || last=$(tail -c 1 "$metrics")
  [ -z "$last" ] || echo >>"$metrics"
  dropped_json=$(json_list "${dropped[@]}") kept_json=$(json_list "${kept[@]}") checkpoint_json=$(json_str "$4")
  printf '{"event":"restart","restart":%d,"max_restarts":%d,"exit_code":%d,"hosts_dropped":%s,"hosts":%s,"old_world":%d,"new_world":%d,"step":%d,"checkpoint":%s,"seconds":%d}\n' \
    "$restarts" "$max_restarts" "$1" "$dropped_json" "$kept_json" "$2" "$world" "$3" "$checkpoint_json" "$5" >>"$metrics"
  metrics_mark=$(stat -c %s "$metrics")
}

# RC: after a job that failed with exit RC, sets world, hosts_now and job_args for the next start;
# returns 1 where there is none (exits 1 where too few ranks are left), having said why.
restart_plan() {
  local rc=$1 old=$world probe_start cap resume_from step=0 arg now
  restart_allowed "$rc" || return 1
  restarts=$((restarts + 1))
  probe_start=$(date +%s)
  probe_hosts
  [ -z "$stop_asked" ] || { restart_allowed "$rc"; return 1; }
  cap=$((capacity < world ? capacity : world))
  world=$(largest_world "$cap")
  if [ "$world" -lt "$min_ranks" ]; then
    local divides="optim.batch_size $batch"
    [ "$bn_exact" -eq 0 ] || divides+=" and moco.bn_splits $bn_splits"
    echo "[moco.sh] the job failed (exit $rc); ${dropped[*]:-no host} did not answer, ${kept[*]:-no host} did: $cap rank(s) left, and the largest world of at most $cap that divides $divides is $world, fewer than --min-ranks $min_ranks: stopping (resume by hand once the hosts are back)" >&2
    exit 1
  fi
  resume_from=$(verified_checkpoint)
  [ -z "$resume_from" ] || step=$((10#${resume_from##*step_}))
  if [ -n "$hosts_now" ]; then
    hosts_now=$elastic_tmp/hostfile.$restarts
    printf '%s\n' "${kept_lines[@]}" >"$hosts_now"
  fi
  # The run's own newest checkpoint, whatever train.resume the first start was given.
  job_args=(--config "$config")
  for arg in "${extra[@]}" "${user_args[@]}"; do [[ $arg == train.resume=* ]] || job_args+=("$arg"); done
  job_args+=("train.resume=${resume_from:-auto}")
  now=$(date +%s)
  log_restart "$rc" "$old" "$step" "$resume_from" $((now - probe_start))
}
