#!/usr/bin/env bash
# Mutation check: do the tests catch small deliberate breakages of the source?
#
#   tools/mutants.sh [SCRATCH_DIR] [NAME_REGEX]
#   tools/mutants.sh --check     builds nothing: exits 1 unless every mutant's text occurs exactly once
#                                in the work tree (a ctest entry runs this, so a refactor keeps the list true)
#
# Copies the working tree (tracked and untracked, not ignored, files) to SCRATCH_DIR/src (default
# /tmp/moco_mutants), builds it once in SCRATCH_DIR/build, then for each mutant below: replaces one
# exact piece of one source file (it must occur exactly once), rebuilds incrementally, runs the
# ctest entries that should catch it, and puts the file back. The work tree is never touched. Prints
# one line per mutant, KILLED or SURVIVED, and exits 1 if any survived, did not apply or matched no test. NAME_REGEX
# picks mutants by name. Needs what the build needs; takes a while (one file recompiled and seven
# binaries relinked per mutant, and the checkpoint mutants run end-to-end checkpoint tests).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
check_only=false
if [ "${1:-}" = --check ]; then check_only=true; shift; fi
scratch=${1:-/tmp/moco_mutants}
only=${2:-.}
src=$scratch/src build=$scratch/build log=$scratch/logs

# name | file | exact text | replacement | ctest -R regex of the entries that must catch it
# (Dispatch routing is checked one way only: a CPU tensor sent to the CUDA backend. The other way
# needs CUDA tensors, which DistDispatchTest checks only where a GPU is.)
mutants=$(cat <<'LIST'
momentum_swapped|src/model/momentum_update.cpp|k.mul_(m).add_(sources[i], 1.0 - m);|k.mul_(1.0 - m).add_(sources[i], m);|^MocoTest\.|^MocoV3Test\.
gradients_summed|src/dist/reducer.cpp|torch::div_out(slot.view, grad, torch::scalar_tensor(static_cast<double>(group_->world_size()), torch::kDouble));|slot.view.copy_(grad);|^Reducer|^mpi\.np2$
crop_at_corner|src/data/view_params.cpp|return {top, left, h, w};|return {0, 0, h, w};|^AugmentTest\.|^LoaderTest\.|^ViewParamsTest\.
crop_centred|src/data/view_params.cpp|return {top, left, h, w};|return {(height - h) / 2, (width - w) / 2, h, w};|^AugmentTest\.|^LoaderTest\.|^ViewParamsTest\.
resize_not_antialiased|src/data/resize.cpp|const float support = scale >= 1.0f ? scale : 1.0f;|const float support = 1.0f;|^data\.augment_parity_torchvision$|^ImageOpsTest\.
hue_wrapped_wrongly|src/data/color_jitter.cpp|h = h < 0.0f ? h + 1.0f : (h >= 1.0f ? h - 1.0f : h);|h = h >= 1.0f ? h - 1.0f : h;|^data\.augment_parity_torchvision$
jpeg_fast_upsampling|src/data/image_decode.cpp|gray ? TJPF_GRAY : TJPF_RGB, TJFLAG_STOPONWARNING)|gray ? TJPF_GRAY : TJPF_RGB, TJFLAG_STOPONWARNING + TJFLAG_FASTUPSAMPLE)|^data\.augment_parity_torchvision$
paper_config_dct_scaling|configs/moco_v2_r50_imagenet.yaml|  dct_scaling: false |  dct_scaling: true |^PaperConfigTest\.
pil_luma_truncated|src/data/pil_color.cpp|b * 7471 + 0x8000) >> 16);|b * 7471) >> 16);|^PilColorTest\.|^data\.augment_parity_torchvision$
pil_blend_wraps_past_255|src/data/pil_color.cpp|if (v >= 255.0f) return 255;|(void)0;|^PilColorTest\.|^data\.augment_parity_torchvision$
pil_contrast_mean_truncated|src/data/pil_color.cpp|return static_cast<uint8_t>(mean + 0.5);|return static_cast<uint8_t>(mean);|^PilColorTest\.|^data\.augment_parity_torchvision$
pil_hue_shift_saturates|src/data/pil_color.cpp|return static_cast<uint8_t>(static_cast<int>(hue_factor * 255.0));|return static_cast<uint8_t>(std::max(0.0, hue_factor * 255.0));|^PilColorTest\.|^data\.augment_parity_torchvision$
pil_hsv_truncates|src/data/pil_color.cpp|clip8(round_half_away(vd * (1.0 - static_cast<double>(fs))));|clip8(static_cast<int>(vd * (1.0 - static_cast<double>(fs))));|^PilColorTest\.|^data\.augment_parity_torchvision$
pil_hue_not_wrapped|src/data/pil_color.cpp|hsv.h = static_cast<uint8_t>(hsv.h + shift);|hsv.h = static_cast<uint8_t>(std::min(255, hsv.h + shift));|^PilColorTest\.|^data\.augment_parity_torchvision$
jitter_order_fixed|src/data/view_params.cpp|std::swap(p.order[i - 1], p.order[detail::uniform_below(rng, i)]);|(void)detail::uniform_below(rng, i);|^ViewParamsTest\.
dispatch_all_to_cuda|src/dist/device_dispatch_group.cpp|return tensor.is_cuda() ? *cuda_ : *cpu_;|return *cuda_;|^DistDispatchTest\.
knn_memory_not_normalised|src/eval/knn.cpp|  const auto memory = unit_rows(memory_features);|  const auto memory = memory_features;|^KnnTest\.
config_bad_choice_accepted|src/run/config.cpp|reading.bad_choices[field.key] = bad.what;|(void)bad;|^ConfigTest\.
config_bad_choice_not_overridable|src/run/config.cpp|reading.bad_choices.erase(field.key);|(void)0;|^ConfigTest\.
config_row_rules_skipped|src/run/config.cpp|require(what.empty(), where, f->key, what);|(void)what;|^ConfigTest\.
config_range_edge_open|src/run/config_keys.cpp|lo_open ? v > lo : v >= lo|v > lo|^ConfigTest\.
augment_row_checks_defaults|src/run/config_keys.cpp|              options.*member = value;|              (void)value;|^ConfigTest\.|^cli\.bad_input\.
config_row_rule_dropped|src/run/config_row.h|    std::get<Binding<T>>(row.binding).rule = std::move(rule);|    (void)rule;|^ConfigTest\.
augment_range_edge_open|src/data/augment_params.cpp|r.lo_open ? x > r.lo : x >= r.lo|x > r.lo|^AugmentParamsTest\.|^ConfigTest\.
lr_not_scaled_by_batch|src/train/schedule.cpp|config.optim.base_lr * static_cast<double>(config.optim.batch_size) / 256.0;|config.optim.base_lr;|^ScheduleTest\.|^cli\.train\.time_budget$
lr_updated_every_step|src/train/schedule.cpp|  if (s.update == run::LrUpdate::kStep) return progress * s.epochs;|  return progress * s.epochs;|^ScheduleTest\.|^cli\.train\.lr_update$
lr_epoch_ignores_budget|src/train/schedule.cpp|  if (s.time_budget_s <= 0) return whole;|  return whole;|^ScheduleTest\.|^cli\.train\.time_budget$
loader_window_ignored|src/data/loader.cpp|next_to_claim < next_to_deliver + window;|true;|^LoaderTest\.
time_budget_ignored|src/run/run_control.cpp|if (time_budget_s_ > 0) p = std::max(p, train_seconds / time_budget_s_);|(void)0;|^cli\.train\.time_budget$
knn_every_epochs_ignored|src/train/pretraining.cpp|if (every > 0 && end.epochs_done % every == 0)|if (false)|^cli\.train\.knn_every_epochs$
shuffle_counter_not_restored|src/train/pretraining.cpp|run_.method->set_draw_counter(state.counter("shuffle_steps"));|(void)state.counter("shuffle_steps");|^ckpt\.resume_bitwise_np1$
loader_not_resumed_mid_epoch|src/train/loop.cpp|epoch == at_.epoch ? at_.batch_in_epoch : 0;|0;|^ckpt\.resume_bitwise_np1$|^lincls\.resume_bitwise$
stop_signal_ignored|src/train/step_book.cpp|preempt::preemption_signal(), data_wait_s}|0, data_wait_s}|^launch\.plain_sigterm$
skip_keeps_bn_stats|src/model/step_rollback.cpp|    torch::where_out(values, keep_new, values, buffers_before_[i]);|    (void)values;|^MocoTest\.|^faults\.nan_skip$|^MocoV3Test\.|^faults\.nan_skip_keys_v3$
h5_attribute_read_one_short|src/h5/attributes.cpp|std::string text(H5Tget_size(type.get()) + 1, '\0');|std::string text(H5Tget_size(type.get()), '\0');|^CkptH5\.|^ckpt\.tools$
roll_call_names_nobody|src/dist/mpi_process_group.cpp|if ((*messages)[static_cast<size_t>(awaited[i])] < 0) silent.push_back(awaited[i]);|(void)arrived;|^faults\.stuck_peer$
roll_call_not_answered_while_waiting|src/dist/mpi_process_group.cpp|if (MPI_Iprobe(MPI_ANY_SOURCE, kRollCallTag, comm, &waiting, &status) != MPI_SUCCESS|if (true|^mpi\.np4$
roll_call_before_the_group_is_made|src/dist/mpi_process_group.cpp|if (comm == MPI_COMM_NULL) return "no roll call|if (false) return "no roll call|^mpi\.np2$
roll_call_answered_at_once|src/dist/mpi_process_group.cpp|!deadline.ran_for(roll_call_window())) return;|false) return;|^mpi\.np2$
log_file_not_written_through|src/run/run_logging.cpp|    if (msg.level >= spdlog::level::info) file_.flush();|    (void)msg.level;|^RunLoggingTest\.
thaw_forgotten|src/dist/running_deadline.h|      thawed_at_ = now;|      (void)0;|^RunningDeadline\.
lincls_backbone_in_train_mode|src/lincls/frozen_backbone.cpp|return net->features(normalised_images.to(device));|net->train(); return net->features(normalised_images.to(device));|^lincls\.full_np2$|^LinclsTest\.
lincls_loader_not_resumed_mid_epoch|src/lincls/linear_probe.h|loader_.start_epoch(epoch, first_batch);|loader_.start_epoch(epoch, 0);|^lincls\.resume_bitwise$
lincls_last_batch_dropped|src/lincls/lincls.cpp|  options.drop_last = false;  // main_lincls.py|  (void)0;  // main_lincls.py|^lincls\.partial_batch$
keep_last_padded_with_one_index|src/data/loader.cpp|global.push_back(global[static_cast<size_t>(i % dataset_size)]);|global.push_back(global[0]);|^EpochOrderTest\.
keep_last_partial_batch_lost|src/data/loader.cpp|  return (per_rank + b - 1) / b;|  return per_rank / b;|^EpochOrderTest\.|^LoaderTest\.
lincls_gradients_not_averaged|src/lincls/linear_classifier.cpp|  reducer_->finalize();|  (void)0;|^mpi\.np2$|^lincls\.cached_np1_np2$
lincls_top5_is_top4|src/lincls/linear_classifier.cpp|t.correct5 = hit.any(1)|t.correct5 = hit.narrow(1, 0, std::min<int64_t>(4, k)).any(1)|^LinclsTest\.|^DistLinclsTest\.
frozen_time_counts|src/dist/running_deadline.h|      end_ += now - last_check_;|      (void)kFrozen;|^mpi\.np2$
freed_host_memory_trimmed|src/sys/host_memory.cpp|mallopt(M_TRIM_THRESHOLD, INT_MAX) != 1|false|^HostMemory
mmap_threshold_left_to_glibc|src/sys/host_memory.cpp|mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1|false|^HostMemory
libtorch_memalign_kept|src/sys/host_memory.cpp|c10::SetCPUAllocator(&allocator, /*priority=*/1);|(void)allocator;|^HostMemory
block_freed_at_wrong_address|src/sys/host_memory.cpp|std::free(bytes - bytes[-1]);|std::free(bytes - 16);|^HostMemory
user_malloc_settings_overridden|src/sys/host_memory.cpp|if (std::getenv(user_setting) != nullptr) return HostMemory::kUserMallocSettings;|(void)user_setting;|^HostMemory
host_memory_switch_ignored|src/sys/host_memory.cpp|if (keep != nullptr && std::strcmp(keep, "0") == 0) return HostMemory::kSwitchedOff;|(void)keep;|^HostMemoryTest\.|^sys\.workarounds_off$
host_memory_outcome_forgotten|src/sys/host_memory.cpp|return last_outcome() = settings_made_or_why_not();|return settings_made_or_why_not();|^HostMemoryKeptTest\.|^sys\.workarounds_logged$
openblas_line_not_logged|src/sys/workarounds.cpp|  spdlog::info("{}", openblas_settings_line());|  (void)0;|^sys\.workarounds_logged$
nan_hook_hits_every_rank|src/sys/fault_hooks.h|return step == at_step && rank == at_rank && what == target;|return step == at_step && what == target;|^FaultHooksTest\.|^faults\.nan_skip$
nan_hook_malformed_accepted|src/sys/fault_hooks.cpp|  if (!std::regex_match(env, m, pattern))|  if (!std::regex_search(env, m, pattern))|^FaultHooksTest\.|^sys\.malformed_hooks$
ckpt_fault_step_ignored|src/sys/fault_hooks.cpp|const bool hit = m[3].matched ? std::stoll(m[3].str()) == step : first_save;|const bool hit = m[3].matched ? true : first_save;|^FaultHooksTest\.|^ckpt\.kill_in_shard$
h5_exit_cleanup_kept|src/h5/hdf5_basics.cpp|    H5dont_atexit();|    (void)0;|^ckpt\.fs_full_async$
h5_system_error_dropped|src/h5/hdf5_basics.cpp|  if (text.system.empty()) text.system = system_error_in(error->desc);|  (void)system_error_in;|^ckpt\.fs_full_sync$
failed_save_tmp_kept|src/ckpt/checkpoint.cpp|    if (group.rank() == 0) discard_failed_save(tmp_dir);|    (void)tmp_dir;|^ckpt\.fs_full_sync$
slow_save_wait_not_logged|src/ckpt/async_saver.cpp|  const bool waits = writing();|  const bool waits = false;|^ckpt\.fs_slow_writer$
metrics_write_errno_dropped|src/metrics/metrics_log.cpp|": write failed" + (errno ? std::string(": ") + std::strerror(errno) : "")|": write failed"|^ckpt\.fs_full_metrics$
sighup_not_handled|src/preempt/preemption.cpp|constexpr int kRanked[] = {SIGUSR1, SIGHUP, SIGINT, SIGTERM};|constexpr int kRanked[] = {SIGUSR1, SIGINT, SIGTERM};|^launch\.plain_sighup$
stop_signals_all_read_as_sigterm|src/preempt/preemption.cpp|    if (sum >= code) found = ranked;|    if (sum > 0) found = ranked;|^launch\.plain_sigint$|^PreemptionTest\.
second_signal_only_recorded|src/preempt/preemption.cpp|if (!recorded.compare_exchange_strong(none, sig) && sig != SIGUSR1) {|if (!recorded.compare_exchange_strong(none, sig) && false) {|^launch\.second_signal$
moco_sh_sigterm_to_mpirun|launch/mpirun/moco.sh|; stop_ranks TERM' TERM|; kill -TERM "$mpirun_pid"' TERM|^launch\.mpirun_sigterm$
moco_sh_second_signal_as_first|launch/mpirun/moco.sh|  if [ -n "$stop_signal" ]; then|  if false; then|^launch\.mpirun_second_signal$
ckpt_export_default_module_unstripped|src/app/ckpt_export.cpp|  return group.substr(0, group.find('/'));|  return group;|^ckpt\.tools$
elastic_bn_splits_assumed|launch/mpirun/elastic.sh|  [ -z "$bn_splits" ]|  false|^launch\.elastic_world_divides_batch_no_bn_splits$
elastic_names_a_method|launch/mpirun/elastic.sh|  [ -z "$bn_splits" ]|  [ "$method" = v3 ]|^style\.method_rooms$
ckpt_names_a_method|src/app/ckpt_export.cpp|  return group.substr(0, group.find('/'));|  return manifest.config_yaml.find("v3") == std::string::npos ? group.substr(0, group.find('/')) : "encoder_q";|^style\.method_rooms$
kit_spoils_no_gradient|src/run/momentum_method.cpp|  if (nan_.hits(step, rank, sys::NanTarget::kGradients))|  if (false)|^faults\.nan_skip_grads$|^faults\.nan_skip_grads_v3$
kit_buffers_never_rank_local|src/run/momentum_method.cpp|item.value(), buffers_rank_local});|item.value()});|^ckpt\.resume_bitwise_bn_rank_local$
ckpt_main_inlined|src/app/moco_ckpt_main.cpp|  add_subcommands(app, request);|  add_subcommands(app, request);
  if (argc == 100) return 0;
  if (argc == 101) return 1;
  if (argc == 102) return 2;
  if (argc == 103) return 3;
  if (argc == 104) return 4;
  if (argc == 105) return 5;
  if (argc == 106) return 6;
  if (argc == 107) return 7;
  if (argc == 108) return 8;
  if (argc == 109) return 9;
  if (argc == 110) return 10;
  if (argc == 111) return 11;
  if (argc == 112) return 12;
  if (argc == 113) return 13;
  if (argc == 114) return 14;
  if (argc == 115) return 15;
  if (argc == 116) return 16;
  if (argc == 117) return 17;
  if (argc == 118) return 18;
  if (argc == 119) return 19;
  if (argc == 120) return 20;
  if (argc == 121) return 21;
  if (argc == 122) return 22;
  if (argc == 123) return 23;
  if (argc == 124) return 24;
  if (argc == 125) return 25;
  if (argc == 126) return 26;
  if (argc == 127) return 27;
  if (argc == 128) return 28;
  if (argc == 129) return 29;
  if (argc == 130) return 30;
  if (argc == 131) return 31;|^style\.mains_thin$
sbatch_swallows_config_error|launch/slurm/moco.sbatch|  printf '%s\n' "$cfg" >&2|  :|^launch\.elastic_sbatch_bound$
official_layout_missing_unchecked|src/app/official_export.h|  if (!room.official_layout)|  if (false)|^OfficialLayoutTest\.
step_folder_digits_unbounded|src/ckpt/checkpoint_dir.cpp|step_(\d{8,18})(\.tmp)?|step_(\d{8,})(\.tmp)?|^CkptRetention\.
fork_never_taken|src/run/later_steps.cpp|    if (folder.step > resumed) later.push_back(std::move(folder));|    if (folder.step > resumed + (1 << 30)) later.push_back(std::move(folder));|^ckpt\.fork$|^ckpt\.corrupt$
damaged_steps_forked|src/run/later_steps.cpp|  if (from_auto)|  if (from_auto && false)|^ckpt\.corrupt$
fork_metrics_not_cut|src/run/later_steps.cpp|row["step"].get<int64_t>() > resumed))|row["step"].get<int64_t>() > resumed + (1 << 30)))|^ckpt\.fork$
fork_latest_left_on_kept_step|src/run/later_steps.cpp|      ckpt::write_latest(root.string(), resumed);|      (void)0;|^ckpt\.fork$
fork_on_dry_run|src/run/run_output.cpp|    checkpointing.keep_later_steps_aside(/*dry_run=*/true);|    checkpointing.keep_later_steps_aside(/*dry_run=*/false);|^ckpt\.fork$
damaged_resume_path_exit_1|src/run/checkpointing.cpp|throw ConfigError(does_not_load(dir, e.what()));|throw ckpt::CheckpointError(does_not_load(dir, e.what()));|^ckpt\.damaged_refused$
moco_format_of_a_probe_unchecked|src/app/ckpt_export.cpp|  check_export_module(dir, module, /*whole_model=*/format == ckpt::ExportFormat::moco);|  if (format != ckpt::ExportFormat::moco) check_export_module(dir, module, false);|^ckpt\.diff_itself$
size_range_unbounded|src/run/config_keys.cpp|v >= lo && v <= hi ?|v >= lo ?|^moco_v3\.cli\.sizes_bounded$|^moco_v2\.cli\.sizes_bounded$
position_not_recounted|src/train/loop.cpp|  at_.batch_in_epoch = at_.step % per_epoch;|  at_.batch_in_epoch = at_.step % per_epoch + 1;|^data\.resume_changed_data$
dry_run_silent_on_changed_data|src/run/checkpointing.cpp|  check_config(ckpt::read_manifest(candidates_.front()), candidates_.front(), true);|  (void)0;|^data\.resume_changed_data$
moved_data_refused|src/run/checkpointing.cpp|    return fingerprinted && (change.key == "data.root"|    return fingerprinted && (change.key == "data.none"|^data\.resume_changed_data$
moved_data_unproven_allowed|src/run/checkpointing.cpp|  const bool fingerprinted = manifest.notes.count(kTrainDataNote) > 0;|  const bool fingerprinted = true;|^data\.resume_changed_data$
unofficial_heads_exported|src/app/official_export.h|    if (const auto keys = room.unofficial_modules(c); !keys.empty())|    if (const auto keys = room.unofficial_modules(c); false)|^moco_v3\.cli\.official_heads$
lock_followed_through_link|src/sys/folder_lock.cpp|O_NOFOLLOW, 0644);|0, 0644);|^FolderLockTest\.
step_folders_renamed_by_step|src/ckpt/checkpoint_dir.cpp|      folders.push_back({std::stoll(m[1].str()), entry.path().string()});|      folders.push_back({std::stoll(m[1].str()), step_dir(root, std::stoll(m[1].str()))});|^CkptStepFolders\.
moco_sh_quoted_substitution_in_poll|launch/mpirun/moco.sh|    here_now=$(local_ranks)|    here_now="$(local_ranks)"|^style\.launch_substitutions_unquoted$
ckpt_pause_parsed_as_kill|src/sys/fault_hooks.cpp|: name == "pause_in_shard"           ? CheckpointFaultKind::kPauseInShard|: name == "pause_in_shard"           ? CheckpointFaultKind::kKillBeforeManifest|^FaultHooksTest\.|^multinode\.link_down_in_checkpoint$
thrown_message_lost|tests/support/thrown_message.h|return e.what();|return "";|^IdxTest\.|^CkptH5\.
lincls_stem_stride_unchecked|src/lincls/frozen_backbone.cpp|if (source.stem_stride != 0 && source.stem_stride != c.model.stem_stride)|if (false)|^lincls\.other_arch$
reducer_layout_unchecked|src/dist/reducer.cpp|  if (group_->world_size() > 1) agree_on_layout();|  (void)0;|^mpi\.np2$
openblas_fallback_kept|src/sys/openblas_kernels.cpp|std::strcmp(detected, "Prescott") != 0) return nullptr;|true) return nullptr;|^OpenblasKernelsTest\.|^cli\.openblas_kernels$
openblas_spin_kept|src/sys/openblas_kernels.cpp|setenv("OPENBLAS_THREAD_TIMEOUT", "16", 1);|setenv("OPENBLAS_THREAD_TIMEOUT", "28", 1);|^cli\.openblas_kernels$
openblas_switch_ignored|src/sys/openblas_kernels.cpp|return value != nullptr && std::strcmp(value, "0") == 0;|return false;|^cli\.openblas_kernels$
openblas_restart_note_lost|src/sys/openblas_kernels.cpp|done.set_timeout = std::strstr(note, "OPENBLAS_THREAD_TIMEOUT") != nullptr;|done.set_timeout = false;|^cli\.openblas_kernels$
data_workers_not_shared|src/run/device.cpp|cores /= std::max(1, local_size);|(void)local_size;|^DataWorkersTest\.
data_workers_zero_kept|src/run/device.cpp|  if (configured > 0) return configured;|  if (configured >= 0) return configured;|^DataWorkersTest\.
threads_ignore_other_ranks|src/run/device.cpp|return configured > 0 ? configured : rank_cores(local_size, cores, node_cores);|return configured > 0 ? configured : cores;|^IntraOpThreadsTest\.
shard_boundary_off_by_one|src/data/image_shards.cpp|[](int64_t i, const Shard& s) { return i < s.first; }|[](int64_t i, const Shard& s) { return i <= s.first; }|^Shards/ImageShardsTest\.|^ImageShardsConcurrency\.
file_list_cache_ignores_mtimes|src/data/file_list_cache.cpp|mtime_ns(fs::path(root) / dir) != recorded) return false;|false) return false;|^FileListCacheTest\.
cuda_device_ignores_per_task_binding|src/run/device.cpp|if (visible == 1) return 0;|if (false) return 0;|^ChooseCudaDeviceTest\.
world_group_at_one_ignored|src/run/device.cpp|if (world_size == 1 && !config.dist.world_group_at_one) {|if (world_size == 1) {|^cli\.train\.world_group_at_one$
world_one_reducer_off|src/run/momentum_method.cpp|if (config_.dist.world_group_at_one) reducer_->set_enabled(true);|(void)0;|^WorldOfOneTest\.|^cli\.train\.world_group_at_one$
world_one_broadcast_shortcut|src/dist/reducer.cpp|  // No shortcut at world size 1: a caller that rehearses a bigger world there (dist.world_group_at_one)|  if (group.world_size() == 1) return;|^WorldOfOneTest\.
gpu_check_results_only_at_the_end|tools/gpu_check.sh|  write_results
}|  :
}|^gpu_check\.self_check$
bucket_views_contiguous|src/dist/reducer.cpp|if (param.dim() == 4 && !param.is_contiguous() && param.is_contiguous(torch::MemoryFormat::ChannelsLast)) {|if (false) {|^ReducerMemoryFormat\.
momentum_buffers_contiguous|src/optim/sgd.cpp|slices.push_back(params.slice(flat, i));|slices.push_back(params.slice(flat, i).contiguous());|^MomentumSgdTest\.
file_list_cache_written_by_every_rank|src/data/file_list_cache.cpp|const std::vector<std::string>& extra_dirs, bool write,
                                    bool write_extra_dirs) {|const std::vector<std::string>& extra_dirs, bool may_write,
                                    bool write_extra_dirs) { const bool write = (static_cast<void>(may_write), true);|^FileListCacheTest\.
layers_model_sees_data|CMakeLists.txt|moco_room(model USES dist)|moco_room(model USES dist data)|^build\.layers_refuse_upward_include$
watchdog_timeout_doubled|src/dist/nccl_watchdog.cpp|now - e.launched >= options_.timeout|now - e.launched >= 2 * options_.timeout|^NcclWatchdog
watchdog_async_error_ignored|src/dist/nccl_watchdog.cpp|if (comm_.try_async_error(error) && error) {|if (false && error) {|^NcclWatchdog
watchdog_abort_not_called|src/dist/nccl_watchdog.cpp|const bool done = comm_.try_abort();|const bool done = false;|^NcclWatchdog
watchdog_aborts_every_fault|src/dist/nccl_watchdog.cpp|if (fault_) return *fault_;|if (false) return *fault_;|^NcclWatchdog
watchdog_finished_kept|src/dist/nccl_watchdog.cpp|if (state == WatchedWork::State::kDone) continue;|(void)state;|^NcclWatchdog
watchdog_grace_skipped|src/dist/nccl_watchdog.cpp|if (clock_.now() - fault_at_ < options_.grace) return Verdict::kFaulted;|(void)fault_at_;|^NcclWatchdog
watchdog_never_ends_process|src/dist/nccl_watchdog.cpp|  end_process_(end_with);|  (void)end_with;|^NcclWatchdog
watchdog_waits_on_comm_lock|src/dist/nccl_watchdog.h|std::unique_lock<std::mutex> lock(mutex, std::try_to_lock);|std::unique_lock<std::mutex> lock(mutex);|^NcclWatchdog\.
settle_past_deadline|src/dist/nccl_watchdog.cpp|if (clock.now() >= deadline) return CommProgress::kInProgress;|if (clock.now() >= deadline + timeout) return CommProgress::kInProgress;|^NcclWatchdogSettle\.
early_device_unchecked|src/run/device.cpp|if (early.launcher.local_rank == world.local_rank && early.index == index_from_mpi) return;|if (true) return;|^EarlyDeviceTest\.
early_device_rank_only|src/run/device.cpp|if (early.launcher.local_rank == world.local_rank && early.index == index_from_mpi) return;|if (early.launcher.local_rank == world.local_rank) return;|^EarlyDeviceTest\.
local_rank_from_slurm_outside_a_step|src/dist/bootstrap.cpp|} else if (is_srun_step(env) && get(env, "SLURM_LOCALID")) {|} else if (get(env, "SLURM_LOCALID")) {|^LauncherLocalRank\.
transport_peer_is_self|src/dist/nccl_transport_log.cpp|it->peers.insert(from == rank ? to : from);|it->peers.insert(from);|^NcclTransportLog\.
nccl_debug_file_overrides_users|src/dist/nccl_transport_log.cpp|    if (user_file == nullptr) plan.set.emplace_back("NCCL_DEBUG_FILE", file);|    plan.set.emplace_back("NCCL_DEBUG_FILE", file);|^NcclTransportLog\.
watchdog_frozen_time_counts|src/dist/nccl_watchdog.cpp|if (last_ && now - *last_ > kFrozen) frozen_ += now - *last_;|(void)kFrozen;|^NcclWatchdogClock\.
skipped_step_moves_weights|src/optim/sgd.cpp|    torch::where_out(p, apply, moved, p);|    p.copy_(moved);|^MomentumSgdTest\.
loss_read_every_step|src/train/pretraining.h|return step % run_.config.train.log_every == 0;|return step > 0;|^HostSyncsTest\.
step_record_acc_off_by_one|src/model/positive_rank.cpp|positive_rank.lt(k).sum()|positive_rank.le(k).sum()|^StepRecordsTest\.
step_record_flags_misread|src/train/step_records.cpp|      if (row[values + r] != 0) {|      if (row[values - 1 + r] != 0) {|^StepRecordsTest\.|^faults\.nan_skip$
nccl_check_ignores_dtype|src/dist/collective_check.cpp|  std::vector<int64_t> words = {d.op, d.dtype, d.ndim, d.numel, d.arg};|  std::vector<int64_t> words = {d.op, d.ndim, d.numel, d.arg};|^DistCheck\.
lincls_fc_init_scale|src/lincls/linear_classifier.cpp|fc_->weight.normal_(0.0, 0.01);|fc_->weight.normal_(0.0, 0.1);|^LinclsProtocolTest\.
lincls_fc_bias_not_zero|src/lincls/linear_classifier.cpp|fc_->bias.zero_();|fc_->bias.fill_(0.01);|^LinclsProtocolTest\.
lincls_milestone_off_by_one|src/train/schedule.cpp|if (epoch >= milestone) lr *= s.gamma;|if (epoch > milestone) lr *= s.gamma;|^LinclsProtocolTest\.
lincls_momentum_drifts|configs/moco_v2_lincls_imagenet.yaml|  momentum: 0.9|  momentum: 0.99|^LinclsProtocolTest\.
lincls_weight_decay_drifts|configs/moco_v1_lincls_imagenet.yaml|  weight_decay: 0|  weight_decay: 0.0001|^LinclsProtocolTest\.
lincls_batch_drifts|configs/moco_v2_lincls_imagenet.yaml|  batch_size: 256|  batch_size: 512|^LinclsProtocolTest\.
lincls_lr_drifts|configs/moco_v1_lincls_imagenet.yaml|  base_lr: 30.0|  base_lr: 3.0|^LinclsProtocolTest\.
lincls_crop_scale_of_pretraining|src/lincls/views.cpp|  protocol.scale_min = c.lincls.crop_scale_min;|  (void)0;|^LinclsProtocolTest\.
augment_eval_off_ignored|src/data/augment_params.cpp|if (param.eval == EvalRule::kOff) view.*member = 0.0;|(void)0;|^AugmentParamsTest\.|^LinclsProtocolTest\.
lincls_backbone_bn_not_frozen|src/lincls/frozen_backbone.cpp|  net->eval();|  net->train();|^LinclsProtocolTest\.|^LinclsTest\.
eval_resize_not_256|src/data/encoded_views.cpp|static_cast<double>(out_size) * 256.0 / 224.0|static_cast<double>(out_size) * 288.0 / 224.0|^LinclsProtocolTest\.|^ImageFolderTest\.
eval_crop_off_centre|src/data/encoded_views.cpp|std::nearbyint(static_cast<double>(r.width - out_size) / 2.0)|std::nearbyint(static_cast<double>(r.width - out_size) / 3.0)|^LinclsProtocolTest\.|^ImageFolderTest\.
knn_k_drifts|src/run/knn_monitor.cpp|  if (config_.knn.k <= bank_size) return config_.knn.k;|  if (config_.knn.k <= bank_size) return config_.knn.k - 1;|^KnnProtocolTest\.
knn_temperature_drifts|src/run/knn_monitor.cpp|  options.temperature = config_.knn.temperature;|  options.temperature = 0.07;|^KnnProtocolTest\.
knn_queries_not_normalised|src/eval/knn.cpp|        unit_rows(query_features.narrow(0, start, std::min(options.query_chunk, query_features.size(0) - start)));|        query_features.narrow(0, start, std::min(options.query_chunk, query_features.size(0) - start));|^KnnProtocolTest\.
knn_memory_is_the_test_split|src/run/knn_monitor.cpp|eval::extract_shard(featurizer, *splits_.train,|eval::extract_shard(featurizer, *splits_.test,|^KnnProtocolTest\.
v2_temperature_drifts|configs/moco_v2_r50_imagenet.yaml|  temperature: 0.2|  temperature: 0.07|^PaperConfigTest\.
v1_milestone_drifts|configs/moco_v1_r50_imagenet.yaml|  milestones: [120, 160]|  milestones: [120, 180]|^PaperConfigTest\.
v2_jitter_always|configs/moco_v2_r50_imagenet.yaml|  jitter_prob: 0.8|  jitter_prob: 1.0|^PaperConfigTest\.
mlp_hidden_not_2048|src/model/resnet.cpp|nn::Sequential(nn::Linear(in, in), nn::ReLU(), nn::Linear(in, options.out_dim))|nn::Sequential(nn::Linear(in, 512), nn::ReLU(), nn::Linear(512, options.out_dim))|^PaperConfigTest\.
step_milestone_off_by_one|src/train/schedule.cpp|if (epoch >= milestone) lr *= s.gamma;|if (epoch > milestone) lr *= s.gamma;|^PaperConfigTest\.|^ScheduleTest\.
zero_init_residual_wrong_bn|src/model/resnet.cpp|(type_ == BlockType::kBasic ? bn2_ : bn3_)->weight.zero_();|bn2_->weight.zero_();|^ResNetTest\.
zero_init_residual_ignored|src/model/resnet.cpp|  if (options.zero_init_residual) {|  if (false) {|^ResNetTest\.
wait_at_launch_ignored|src/dist/reducer.cpp|    wait_in_hook(bucket);|    (void)0;|^ReducerFake\.|^ReducerWorld\.
wait_at_launch_not_set|src/dist/reducer.cpp|  wait_at_launch_ = wait;|  (void)wait;|^ReducerFake\.|^ReducerWorld\.
buckets_not_driven|src/dist/reducer.cpp|    progress_->add(work_[bucket]);  // see Note [Driving the all-reduces during backward]|    (void)0;|^ReducerProgress\.
driven_after_finalize|src/dist/reducer.cpp|    if (progress_) progress_->pause();  // wait() below is this thread's alone|    (void)0;|^ReducerProgress\.
progress_driven_everywhere|src/dist/reducer.cpp|  if (group_->progresses_only_inside_calls()) progress_ =|  if (true) progress_ =|^ReducerProgress\.
failing_work_kept|src/dist/progress_thread.cpp|        failed.push_back(work.get());  // its wait() rethrows|        (void)0;|^ReducerProgress\.
export_inside_source_allowed|src/app/ckpt_export.cpp|  if (sys::lies_within(out, dir))|  if (false)|^tools\.export_inside_source$
export_existing_replaced|src/app/ckpt_export.cpp|  if (std::filesystem::exists(out, ec) && !force)|  if (false)|^tools\.export_existing$
export_folder_accepted|src/app/ckpt_export.cpp|  if (std::filesystem::is_directory(out, ec))|  if (false)|^tools\.export_existing$
export_tmp_left|src/ckpt/export.cpp|    std::filesystem::remove(tmp, ec);|    (void)ec;|^tools\.export_existing$|^ckpt\.fs_export_full$
diff_bad_ignore_exits_1|src/app/moco_ckpt_main.cpp|      throw Refusal(fmt::format("diff: --ignore|      throw std::runtime_error(fmt::format("diff: --ignore|^tools\.diff_bad_flags$
diff_negative_atol_accepted|src/app/moco_ckpt_main.cpp|>= 0 ? std::string() : "must be >= 0, not " + v;|>= -1e300 ? std::string() : "must be >= 0, not " + v;|^tools\.diff_bad_flags$
pack_out_in_src_allowed|src/app/moco_pack_main.cpp|    if (moco::sys::lies_within(a.out, a.src))|    if (false)|^tools\.pack_inside_src$
pack_rename_errno_lost|src/data/image_pack.cpp|" to it: " + why +|" to it: " + std::error_code().message() +|^tools\.pack_all_or_none$
pack_renamed_shards_kept|src/data/image_pack.cpp|    for (size_t j = 0; j < i; ++j) fs::remove(tasks[j].final_path, ignored);|    (void)ignored;|^tools\.pack_all_or_none$
pack_leftovers_kept|src/data/image_pack.cpp|    if (fs::remove(entry.path(), removed))|    if (false)|^tools\.pack_leftovers_removed$
pack_live_tmp_removed|src/data/image_pack.cpp|::kill(static_cast<pid_t>(pid), 0) == 0|false|^tools\.pack_leftovers_removed$
config_second_document_ignored|src/run/config.cpp|  if (documents.size() > 1)|  if (false)|^tools\.config_two_documents$
harness_all_skipped_passes|tests/support/gtest_main.cpp|unit.skipped_test_count() > 0) return 77;|unit.skipped_test_count() > 0) return 0;|^build\.harness_exit_codes$
harness_failures_read_as_skipped|tests/support/gtest_main.cpp|  if (!failed && !launched && unit.successful_test_count() == 0|  if (!launched && unit.successful_test_count() == 0|^build\.harness_exit_codes$
micro_batch_change_free_for_any_method|src/run/config.cpp|bool pieces_exact(const Config& c) { return is_vit(c.model.arch); }|bool pieces_exact(const Config& c) { return is_vit(c.model.arch) or c.methods != nullptr; }|^moco_v2\.cli\.micro_batch$
room_world_checks_skipped|src/run/config.cpp|    method_room(c).check_for_world(c, world_size, where);|    (void)0;|^moco_v2\.cli\.micro_batch$
lincls_pretrained_file_unnamed|src/lincls/frozen_backbone.cpp|    throw ConfigError(
        fmt::format("model.pretrained: {} is a file but not|    throw std::runtime_error(
        fmt::format("model.pretrained: {} is a file but not|^tools\.lincls_pretrained_not_hdf5_np1$
lincls_run_above_checkpoint_ignored|src/lincls/lincls.cpp|  if (path.parent_path().filename() == "checkpoints") folders.push_back|  if (false) folders.push_back|^tools\.lincls_inside_run_np1$
refusal_log_kept|src/app/program.cpp|    if (s.log_undo) s.log_undo->undo();|    (void)s.log_undo;|^tools\.resume_refused_writes_nothing_np1$
export_module_unchecked|src/app/ckpt_export.cpp|  if (modules.count(module)) return;|  if (true) return;|^tools\.export_existing$
refusal_log_appended|src/run/run_logging.cpp|    std::filesystem::resize_file(file_, file_size_, ec);|    (void)file_size_;|^tools\.resume_refused_writes_nothing_np1$
log_write_failure_unchecked|src/train/loop.cpp|  run::check_log_writes();  // a run whose rank<N>.log cannot be written stops, as for metrics.jsonl|  (void)0;|^ckpt\.fs_full_log$
export_failure_names_tmp_only|src/ckpt/export.cpp|throw CheckpointError(fmt::format("export to {} failed, {} left as it was: {}{}", out_path, out_path, e.what(),|throw CheckpointError(fmt::format("{}{}", e.what(),|^ckpt\.fs_export_full$
pack_write_failure_tmps_kept|src/data/image_pack.cpp|    remove_tmps(tasks);
    throw;|    throw;|^ckpt\.fs_pack_full$
log_error_handler_spdlogs|src/run/run_logging.cpp|  logger->set_error_handler(|  if (false) logger->set_error_handler(|^ckpt\.fs_full_log$
ckpt_manifest_errno_lost|src/sys/durable_file.cpp|(errno ? std::string(": ") + std::strerror(errno) : "")|std::string()|^ckpt\.fs_full_manifest$
ckpt_latest_failure_kept|src/ckpt/checkpoint.cpp|    fs::rename(final_dir, tmp_dir, ec);|    ec.clear();|^ckpt\.fs_full_latest$
ckpt_latest_tmp_kept|src/sys/durable_file.cpp|    std::filesystem::remove(tmp, ignored);|    (void)ignored;|^ckpt\.fs_full_latest$
lincls_log_failure_unchecked|src/train/loop.cpp|  run::check_log_writes();  // a run whose rank<N>.log cannot be written stops, as for metrics.jsonl|  (void)0;|^ckpt\.fs_lincls_full_log$
export_format_torch_writes_h5|src/ckpt/export.cpp|  if (format == ExportFormat::torch) {|  if (false) {|^CkptExport\.|^tools\.export_existing$
export_unknown_format_exits_1|src/app/ckpt_export.cpp|  if (!format) throw Refusal(|  if (!format) throw std::runtime_error(|^tools\.export_existing$
export_detectron2_pkl_accepted|src/app/ckpt_export.cpp|*format == ckpt::ExportFormat::detectron2 && ends_with(out, ".pkl")|false && ends_with(out, ".pkl")|^tools\.export_existing$
export_detectron2_head_dropped|src/app/ckpt_export.cpp|format == ckpt::ExportFormat::detectron2;|false;|^tools\.export_existing$
detectron2_stem_prefix_everywhere|src/ckpt/torch_export.cpp|  if (k.find("layer") == std::string::npos) k = "stem." + k;|  k = "stem." + k;|^CkptExport\.
detectron2_bn3_kept|src/ckpt/torch_export.cpp|for (int t = 1; t <= 3; ++t) k = replace_all|for (int t = 1; t <= 2; ++t) k = replace_all|^CkptExport\.
detectron2_shortcut_norm_unnamed|src/ckpt/torch_export.cpp|  return replace_all(k, "downsample.1", "shortcut.norm");|  return k;|^CkptExport\.
detectron2_author_wrong|src/ckpt/torch_export.cpp|content.insert("__author__", std::string("MOCO"));|content.insert("__author__", std::string("Caffe2"));|^CkptExport\.
detectron2_no_matching_heuristics|src/ckpt/torch_export.cpp|content.insert("matching_heuristics", true);|content.insert("matching_heuristics", false);|^CkptExport\.
torch_pickle_type_tags|src/ckpt/torch_export.cpp|/*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);|/*get_tensor_id=*/nullptr, /*tag_aggregates=*/true);|^ckpt\.moco_format_v2_resnet18$|^interop\.torch2_load$
official_queue_ptr_float|src/ckpt/official_checkpoint.cpp|    dict.insert(key, tensor.contiguous());|    dict.insert(key, key == "module.queue_ptr" ? tensor.to(torch::kFloat) : tensor.contiguous());|^OfficialLayoutTest\.|^ckpt\.moco_format_v2_resnet18$
official_queue_transposed|src/ckpt/official_checkpoint.cpp|    dict.insert(key, tensor.contiguous());|    dict.insert(key, key == "module.queue" ? tensor.t().contiguous() : tensor.contiguous());|^OfficialLayoutTest\.|^ckpt\.moco_format_v2_resnet18$
official_state_indices_shifted|src/ckpt/official_checkpoint.cpp|indices.trained[item.first] = indices.count;|indices.trained[item.first] = indices.count + 1;|^OfficialLayoutTest\.|^ckpt\.moco_format_v2_resnet18$
official_momentum_encoder_not_counted|src/ckpt/official_checkpoint.cpp|      ++indices.count;|      if (m.trained) ++indices.count;|^OfficialLayoutTest\.|^ckpt\.moco_format_v3_resnet18_lars$
official_bn_statistics_counted|src/ckpt/official_checkpoint.cpp|    if (ends_with(name, suffix)) return true;|    (void)suffix;|^OfficialLayoutTest\.|^ckpt\.moco_format_v2_resnet18$
official_scaler_state_not_exported|src/ckpt/official_checkpoint.cpp|    if (name == "scaler/scale") scale = tensor.to(torch::kDouble).item<double>();|    (void)name;|^OfficialLayoutTest\.
official_epoch_off_by_one|src/ckpt/export.cpp|if (name == "progress/epoch") return tensor.item<int64_t>();|if (name == "progress/epoch") return tensor.item<int64_t>() + 1;|^ckpt\.moco_format_v2_resnet18$
official_lars_state_named_like_sgd|src/ckpt/official_checkpoint.cpp|kind == Kind::kLars) return "mu";|kind == Kind::kLars) return "momentum_buffer";|^OfficialLayoutTest\.|^ckpt\.moco_format_v3_resnet18_lars$
official_adamw_without_step|src/ckpt/official_checkpoint.cpp|  if (kind == Kind::kAdamw) add_adamw_steps(state, tensors);|  (void)0;|^OfficialLayoutTest\.|^ckpt\.moco_format_v3_vit_tiny_adamw_np2$
official_param_group_short|src/ckpt/official_checkpoint.cpp|for (int64_t i = 0; i < parameters; ++i) params.push_back(i);|for (int64_t i = 1; i < parameters; ++i) params.push_back(i);|^OfficialLayoutTest\.|^ckpt\.moco_format_v2_resnet18$
official_sgd_nesterov|src/ckpt/official_checkpoint.cpp|group.insert("nesterov", false);|group.insert("nesterov", true);|^ckpt\.moco_format_v2_resnet18$
official_unplaced_tensor_dropped|src/ckpt/official_checkpoint.cpp|    if (!m)
      throw CheckpointError(|    if (!m) continue;
    if (!m)
      throw CheckpointError(|^OfficialLayoutTest\.
official_lr_of_next_step|src/app/official_export.h|static_cast<double>(m.step - 1);|static_cast<double>(m.step);|^ckpt\.moco_format_v2_resnet18$
official_arch_note_silent|src/app/official_export.h|  if (differs.empty()) return {};|  return {};|^ckpt\.moco_format_v3_vit_tiny_adamw_np2$
export_moco_module_accepted|src/app/ckpt_export.cpp|format == ckpt::ExportFormat::moco && (!r.module.empty()|false && (!r.module.empty()|^ckpt\.moco_format_v2_resnet18$
export_rank_local_bn_dropped|src/ckpt/export.cpp|(record.shard == 0 && is_batchnorm_statistic(record.name))|(false && is_batchnorm_statistic(record.name))|^ckpt\.moco_format_v2_resnet18_bn_rank_local_np2$
export_rank_local_bn_of_rank_1|src/ckpt/export.cpp|(record.shard == 0 && is_batchnorm_statistic(record.name))|(record.shard == 1 && is_batchnorm_statistic(record.name))|^ckpt\.moco_format_v2_resnet18_bn_rank_local_np2$
config_override_second_document_ignored|src/run/config.cpp|      value = single_document(YAML::LoadAll(item.substr(eq + 1)), where + ": key '" + key + "'", "a value");|      value = YAML::Load(item.substr(eq + 1));|^tools\.config_override_two_documents$|^ConfigTest\.
pack_marker_unchecked|src/data/image_shards.cpp|  if (!read_pack_marker(dir, split, pack_id, marked))|  if (false)|^tools\.pack_interrupted$|^ImagePackTest\.
pack_shard_of_other_pack_accepted|src/data/image_shards.cpp|      if (c.pack_id != pack_id)|      if (false)|^tools\.pack_interrupted$|^ImagePackTest\.
pack_old_marker_kept|src/data/image_pack.cpp|    fs::remove(marker, ec);|    (void)marker;|^tools\.pack_interrupted$
pack_marker_not_written|src/data/image_pack.cpp|      write_pack_marker(out_dir, split.name, tasks.front().pack_id, tasks.front().num_shards);|      (void)0;|^tools\.pack_interrupted$|^cli\.train\.hdf5_pack_np2$
pil_resize_support_not_scaled|src/data/pil_resize.cpp|const double support = 1.0 * filterscale;|const double support = 1.0;|^PilOpsTest\.|^data\.augment_parity_torchvision$
pil_resize_weights_truncated|src/data/pil_resize.cpp|static_cast<int32_t>(0.5 + k * (1 << kPilPrecisionBits))|static_cast<int32_t>(k * (1 << kPilPrecisionBits))|^PilOpsTest\.|^data\.augment_parity_torchvision$
pil_blur_edge_weight_dropped|src/data/pil_blur.cpp|b.edge = ((1u << 24) - static_cast<uint32_t>(b.radius * 2 + 1) * b.inner) / 2;|b.edge = 0;|^PilOpsTest\.|^data\.augment_parity_torchvision$
pil_blur_radius_not_extended|src/data/pil_blur.cpp|  return whole + fraction;|  return whole;|^PilOpsTest\.|^data\.augment_parity_torchvision$
pil_blur_first_window_short|src/data/pil_blur.cpp|static_cast<uint32_t>(src[x]) * static_cast<uint32_t>(r + 1)|static_cast<uint32_t>(src[x]) * static_cast<uint32_t>(r)|^PilOpsTest\.|^data\.augment_parity_torchvision$
pil_blur_truncated|src/data/pil_blur.cpp|edge + (1u << 23)) >> 24|edge) >> 24|^PilOpsTest\.|^data\.augment_parity_torchvision$
pil_view_tensor_blur|src/data/view_augment.cpp|pil::color_jitter, pil_gaussian_blur,|pil::color_jitter, gaussian_blur,|^data\.augment_parity_torchvision$
pil_view_tensor_resize|src/data/view_augment.cpp|static const ViewOps pil{pil_resized_crop,|static const ViewOps pil{resized_crop,|^data\.augment_parity_torchvision$
pil_view_tensor_jitter|src/data/view_augment.cpp|pil::to_grayscale, pil::color_jitter,|pil::to_grayscale, color_jitter,|^data\.augment_parity_torchvision$
batch_ignores_transforms|src/data/augment.cpp|augment_view(image, params, o.recipe, o.transforms, o.out_size)|augment_view(image, params, o.recipe, Transforms::kTensor, o.out_size)|^ViewAugmentTest\.
encoded_views_ignore_transforms|src/data/encoded_views.cpp|augment_view(decoded.image, q, o.recipe, o.transforms, o.out_size)|augment_view(decoded.image, q, o.recipe, Transforms::kPil, o.out_size)|^ImageFolderTest\.
eval_dataset_ignores_transforms|src/data/encoded_dataset.cpp|eval_size_, dct_scaling_, transforms_)|eval_size_, dct_scaling_, Transforms::kPil)|^ImageFolderTest\.
eval_view_ignores_transforms|src/data/encoded_views.cpp|r.height, r.width, transforms);|r.height, r.width, Transforms::kTensor);|^ImageFolderTest\.|^data\.augment_parity_torchvision$
transforms_default_tensor|src/data/augment_options.h|  Transforms transforms = Transforms::kPil;|  Transforms transforms = Transforms::kTensor;|^ConfigTest\.
legacy_transforms_read_as_default|src/run/config.cpp|    {"data.transforms", "tensor"},|    {"data.transforms", "pil"},|^ConfigTest\.|^ckpt\.refusals$
legacy_lr_update_read_as_default|src/run/config.cpp|    {"optim.lr_update", "step"},|    {"optim.lr_update", "epoch"},|^ConfigTest\.|^ckpt\.refusals$
legacy_values_replace_given_keys|src/run/config.cpp|    if (!holds_key(root, before.key)) assign|    if (true) assign|^ConfigTest\.|^ckpt\.refusals$
holds_key_stops_at_the_section|src/run/config.cpp|  return child.IsDefined() && (dot == std::string::npos|  return child.IsDefined() && (true|^ConfigTest\.|^ckpt\.refusals$
transforms_names_swapped|src/run/config_keys.cpp|{{Transforms::kPil, "pil"}, {Transforms::kTensor, "tensor"}}|{{Transforms::kPil, "tensor"}, {Transforms::kTensor, "pil"}}|^ConfigTest\.|^PaperConfigTest\.
jitter_dispatch_skips_saturation|src/data/color_jitter.cpp|        if (p.saturation != 1.0) ops.saturation(image, p.saturation);|        (void)0;|^ImageOpsTest\.|^PilColorTest\.|^data\.augment_parity_torchvision$
pil_hue_turns_not_wrapped|src/data/pil_color.cpp|h = static_cast<float>(turns >= 1.0 ? turns - 1.0 : turns);|h = static_cast<float>(turns);|^PilColorTest\.|^data\.augment_parity_torchvision$
pil_hsv_round_truncates|src/data/pil_color.cpp|return x - static_cast<double>(i) >= 0.5 ? i + 1 : i;|return i;|^PilColorTest\.|^data\.augment_parity_torchvision$
pil_hsv_table_saturation_wrong|src/data/pil_color.cpp|rgb_to_hsv(static_cast<uint8_t>(b), lo, lo).s;|rgb_to_hsv(static_cast<uint8_t>(b), lo, 0).s;|^PilColorTest\.|^data\.augment_parity_torchvision$
pil_hsv_table_green_case_wrong|src/data/pil_color.cpp|h_g[i] = rgb_to_hsv(ua, 255, ub).h;|h_g[i] = rgb_to_hsv(255, ua, ub).h;|^PilColorTest\.|^data\.augment_parity_torchvision$
transpose_odd_columns_misplaced|src/data/plane_transpose.cpp|dst + (2 * k + 1) * rows)|dst + (2 * k) * rows)|^PlaneTransposeTest\.|^PilOpsTest\.
transpose_right_columns_skipped|src/data/plane_transpose.cpp|  transpose_scalar(src, 0, full_rows, full_cols, cols, rows, src_stride, dst);|  (void)full_cols;|^PlaneTransposeTest\.
pil_flat_blend_table_off_by_one|src/data/pil_color.cpp|  for (uint8_t& p : image.pixels) p = table[p];|  for (uint8_t& p : image.pixels) p = table[p == 255 ? p : p + 1];|^PilColorTest\.|^data\.augment_parity_torchvision$
pil_saturation_clamp_low|src/data/pil_color.cpp|alpha * (value - degenerate), 0.0f, 255.0f));|alpha * (value - degenerate), 0.0f, 254.0f));|^PilColorTest\.|^data\.augment_parity_torchvision$
openblas_restart_named_exe|src/sys/openblas_kernels.cpp|  execv(own_path().c_str(), argv.data());|  execv("/proc/self/exe", argv.data());|^cli\.openblas_kernels$
bench_data_folder_unchecked|bench/bench_data.cpp|!std::filesystem::is_directory(dir)|false|^bench\.data_arguments$
chores_no_bn_agreement_before_save|src/train/loop.cpp|  parts_.method.before_save();|  (void)0;|^ckpt\.resume_bitwise_np2$|^cli\.train\.bn_buffers_np2$
room_links_hdf5_where_not_called|CMakeLists.txt|moco_room(dist LIBS MPI::MPI_C)|moco_room(dist LIBS MPI::MPI_C HDF5::HDF5)|^build\.layers_refuse_upward_include$
room_libraries_public|CMakeLists.txt|PUBLIC moco_common ${used_targets} PRIVATE ${ARG_LIBS})|PUBLIC moco_common ${used_targets} ${ARG_LIBS})|^build\.layers_refuse_upward_include$
flat_not_bound_again|src/model/flat_tensors.cpp|  if (!bound()) bind();|  (void)0;|^FlatTensorsTest\.|^MocoTest\.
flat_copied_again|src/model/flat_tensors.cpp|    if (bound()) return;|    (void)0;|^FlatTensorsTest\.
flat_slices_unaligned|src/model/flat_tensors.cpp|std::max<int64_t>(1, kAlignBytes / tensors_[0].element_size());|1;|^FlatTensorsTest\.
flat_versions_not_bumped|src/model/flat_tensors.cpp|  for (const auto& t : tensors_) t.unsafeGetTensorImpl()->bump_version();|  (void)0;|^FlatTensorsTest\.
sgd_gradients_not_bound|src/optim/sgd.cpp|      g = slice;|      (void)0;|^UpdateOpsTest\.
sgd_gradientless_parameter_stepped|src/optim/sgd.cpp|      all = false;|      (void)all;|^MomentumSgdTest\.
sgd_buffers_keep_old_layout|src/optim/sgd.cpp|  if (buffers_.same_layout(params_)) return;|  return;|^MomentumSgdTest\.
sgd_versions_not_bumped|src/optim/sgd.cpp|  params_.bump_versions();|  (void)0;|^MomentumSgdTest\.
sgd_flat_gradients_not_zeroed|src/optim/sgd.cpp|    grads_.zero_();|    (void)0;|^MomentumSgdTest\.
op_count_sees_no_updates|src/sys/op_count.cpp|  if (open_updates.empty()) return nullptr;|  return nullptr;|^UpdateOpsTest\.
broadcast_flat_copied|src/dist/reducer.cpp|    if (kind.size() == 1 && only.is_contiguous()) {|    if (false) {|^ReducerBroadcast\.
step_syncs_unchecked_on_cpu|src/train/step_sync_check.cpp|  if (on) no_reads_.emplace("debug.check_step_syncs: inside a training step");|  (void)0;|^HostSyncsTest\.
host_reads_never_forbidden|src/run/host_reads.cpp|  if (forbidden_by)|  if (false)|^HostSyncsTest\.
moco_sh_mpirun_in_the_scripts_group|launch/mpirun/moco.sh|command -v setsid >/dev/null && own_session=(setsid)|true|^launch\.mpirun_group_sigint$
export_into_its_run|src/app/ckpt_export.cpp|  for (const auto& source : {path, run_of(dir)})|  for (const auto& source : {std::string()})|^tools\.export_into_run$
export_force_replaces_any_file|src/app/ckpt_export.cpp|  if (std::filesystem::exists(out, ec) && !std::filesystem::is_regular_file(out, ec))|  if (false)|^tools\.export_force_special$
pack_split_any_name|src/app/moco_pack_main.cpp|    if (!plain)|    if (false)|^tools\.pack_split_names$
output_dir_deletion_unnoticed|src/run/run_logging.cpp|  check_output_still_there();|  (void)0;|^tools\.output_dir_deleted_np1$|^tools\.lincls_output_dir_deleted_np1$
export_tmp_left_on_signal|src/ckpt/export.cpp|  const sys::RemovedOnSignal interrupted(tmp);|  (void)0;|^tools\.export_interrupted$
export_stale_tmp_kept|src/app/ckpt_export.cpp|  for (const auto& stale : sys::remove_stale_temporaries(r.out))|  for (const auto& stale : std::vector<std::string>())|^tools\.export_interrupted$
moco_sh_zero_ranks|launch/mpirun/moco.sh|[[ $2 =~ [1-9] ]]|true|^cli\.bad_input\.moco_sh_ranks$
pack_threads_zero_allowed|src/app/moco_pack_main.cpp|n >= 1 ? std::string()|n >= 0 ? std::string()|^cli\.bad_input\.pack_threads_0$
pack_split_twice_allowed|src/app/moco_pack_main.cpp|if (!seen.insert(split).second)|if (false)|^cli\.bad_input\.pack_split_twice$
export_empty_out_allowed|src/app/ckpt_export.cpp|  if (out.empty()) throw Refusal("export: OUT is empty: name a file to write");|  (void)0;|^cli\.bad_input\.export_out_empty$
knn_k_clamp_unsaid|src/run/knn_monitor.cpp|  if (config_.knn.k <= bank_size) return config_.knn.k;|  return config_.knn.k;|^cli\.bad_input\.knn_k_above_bank$
folder_lock_verdict_ignored|src/run/run_output.cpp|  if (holder.empty()) {|  if (true) {|^tools\.two_runs_one_folder_np1$
folder_lock_holder_unnamed|src/sys/folder_lock.cpp|  return "host " + holder.substr(0, space) + " pid " + holder.substr(space + 1);|  return holder;|^tools\.pack_locked$
folder_lock_file_left|src/sys/folder_lock.cpp|  if (still_at_path(fd, path)) ::unlink(path.c_str());|  (void)0;|^tools\.pack_locked$
folder_lock_failure_ignored|src/sys/folder_lock.cpp|    if (::flock(fd, operation|    if (0 * ::flock(fd, operation|^tools\.two_runs_one_folder_np1$|^tools\.pack_locked$
lost_host_daemon_end_unseen|launch/mpirun/moco.sh|    elif [[ $children != *" $p "* ]]; then agent_ended=1; fi|    elif false; then agent_ended=1; fi|^multinode\.link_down_head_node$
lost_host_ssh_left|launch/mpirun/moco.sh|pkill -KILL -s "$mpirun_pid"|true -KILL -s "$mpirun_pid"|^multinode\.link_down$
knn_shards_not_merged|src/eval/knn.cpp|    if (world > 1) {|    if (false) {|^mpi\.np2$
knn_cap_takes_the_first|src/eval/knn.cpp|? j : j * size / n;|? j : j;|^KnnTest\.
knn_shard_padding_kept|src/eval/knn.cpp|  return {features.narrow(0, 0, rows), labels.narrow(0, 0, rows), n};|  return {features, labels, n};|^mpi\.np4$
knn_monitor_bank_gathered|src/run/knn_monitor.cpp|  options.k = neighbours(memory.total);|  options.k = neighbours(memory.features.size(0));|^cli\.bad_input\.knn_k_above_bank$|^mpi\.np2$
folder_lock_unwritable_fatal|src/sys/folder_lock.cpp|      spdlog::warn("{}: locked, but cannot write this run's host and pid into it: {}", path, std::strerror(errno));|      throw std::runtime_error(path + ": cannot write the lock file");|^ckpt\.fs_full_metrics$
probe_gradients_not_averaged|src/run/online_probe.cpp|  grads.div_(group_.world_size());|  (void)0;|^mpi\.np2$
probe_not_checkpointed|src/train/pretraining.cpp|  return probe_ ? probe_->state_entries() : std::vector<ckpt::StateEntry>{};|  return std::vector<ckpt::StateEntry>{};|^cli\.train\.online_probe_np2$
probe_ignores_skipped_steps|src/run/online_probe.cpp|  sgd_.step(trained);|  sgd_.step();|^OnlineProbeTest\.
probe_switch_on_resume_allowed|src/run/config.cpp|  if (key == "eval.online_probe" |  if (key == "eval.online_probe_" |^cli\.train\.online_probe_np2$
baselines_block_the_first_step|src/train/pretraining.cpp|  result_.knn_trained = std::nan("");
|  result_.knn_trained = std::nan("");
  score_baselines();
|^cli\.train\.knn_every_epochs$
initial_weights_copied_after_resume|src/train/pretraining.cpp|  knn_random_init_ = state.value("knn_random_init");|  initial_.emplace(run_.method->encoder());
  knn_random_init_ = state.value("knn_random_init");|^cli\.train\.random_init_after_resume$
initial_weights_not_given_back|src/run/initial_weights.cpp|      for (size_t i = 0; i < own.size(); ++i) live[i].second.detach().copy_(own[i]);|      (void)0;|^InitialWeightsTest\.|^cli\.train\.evaluation_neutral$
abort_reason_only_in_the_log|src/dist/bootstrap.cpp|  if (!logs_to_console()) std::fprintf(|  if (false) std::fprintf(|^tools\.rank_log_deleted_np2$
baselines_not_in_final_checkpoint|src/train/loop.cpp|  if (end.finished) job_.before_final_save();|  if (false) job_.before_final_save();|^ckpt\.resume_bitwise_np1$
knn_subset_first_ignored|src/eval/knn.cpp|subset == Subset::kFirst |false |^KnnTest\.
override_twice_allowed|src/run/config.cpp|given.emplace(key, item); !fresh)|given.emplace(key, item); false)|^ConfigTest\.|^cli\.bad_input\.override_twice$
moco_sh_resume_beside_the_users|launch/mpirun/moco.sh|given train.resume "$@"|false|^cli\.bad_input\.override_twice$
negative_milestone_allowed|src/run/config_keys.cpp|    if (epoch < 0) return fmt::format(|    if (epoch < -1e300) return fmt::format(|^ConfigTest\.|^cli\.bad_input\.negative_milestones$
pretrained_empty_folder_exit_1|src/lincls/frozen_backbone.cpp|  if (!dir) throw ConfigError(|  if (!dir) throw std::runtime_error(|^cli\.bad_input\.pretrained_without_checkpoint$
split_below_one_batch_exit_1|src/train/training_run.cpp|    throw run::ConfigError(fmt::format("key 'optim.batch_size' ({}): {}"|    throw std::runtime_error(fmt::format("key 'optim.batch_size' ({}): {}"|^cli\.bad_input\.split_below_one_batch$
step_memory_unchecked|src/run/config.cpp|  require_fits(step_memory(c, world_size, job), memory_limit(), where);|  (void)step_memory(c, world_size, job);|^cli\.bad_input\.batch_buffers_too_big$|^tools\.queue_too_large_np1$
reducer_accumulated_ignored|src/dist/reducer.cpp|  if (add_accumulated_ && earlier.defined()) {|  if (add_accumulated_ && earlier.defined() && false) {|^ReducerWorld\.
reducer_accumulation_never_added|src/dist/reducer.cpp|  if (local_only_.load() && !on) add_accumulated_ = true;|  if (local_only_.load() && !on) add_accumulated_ = false;|^ReducerWorld\.
reducer_accumulation_kept_next_step|src/dist/reducer.cpp|  add_accumulated_ = false;|  (void)add_accumulated_;|^ReducerWorld\.
micro_batch_share_unchecked|src/run/config.cpp|(piece <= share && share % piece == 0)|(piece <= share)|^moco_v3\.cli\.micro_batch$
micro_batch_method_unchecked|src/run/config.cpp|  if (c.optim.micro_batch > 0 && !room.accepts.micro_batch) {|  if (c.optim.micro_batch > 0 && !room.accepts.micro_batch && false) {|^moco_v2\.cli\.accepts$
micro_batch_changes_math|src/run/config.cpp|"optim.micro_batch", "model.activation_checkpointing"};|"optim.micro_batch_x", "model.activation_checkpointing"};|^moco_v3\.cli\.micro_batch$
micro_batch_pieces_miscounted|src/run/memory_plan.cpp|                     share / piece);|                     share / piece + 1);|^moco_v3\.cli\.micro_batch$
vit_checkpoint_recompute_without_autocast|src/model/checkpointed.h|      const AutocastGuard autocast(x.device(), ctx->saved_data["autocast"].toBool(),|      const AutocastGuard autocast(x.device(), false && ctx->saved_data["autocast"].toBool(),|^VitTest\.
checkpoint_gradient_scaled|src/model/checkpointed.h|    torch::autograd::backward({out}, {grad[0]});|    torch::autograd::backward({out}, {grad[0] * 2});|^VitTest\.|^ResNetTest\.|^ActivationCheckpointingTest\.
checkpoint_recompute_moves_statistics|src/model/checkpointed.h|      const KeptBuffers moved_once(*module);|      (void)0;|^ResNetTest\.|^ActivationCheckpointingTest\.
resnet_checkpointed_estimate_without_stage_inputs|src/model/resnet.cpp|    if (stage < 3) walk.keep_output();|    (void)stage;|^BackboneSizeTest\.
resnet_stages_not_checkpointed|src/model/resnet.cpp|    y = checkpointed(**stage, y, options_.activation_checkpointing);|    y = (*stage)->forward(y);|^BackboneSizeTest\.|^ResNetTest\.
vit_checkpointing_not_wired|src/run/setup.cpp|  o.activation_checkpointing = c.model.activation_checkpointing;|  (void)0;|^BackboneSizeTest\.
vit_checkpointing_estimate_ignored|src/model/vit.cpp|  const double blocks_saved = o.activation_checkpointing ?|  const double blocks_saved = false ?|^BackboneSizeTest\.
step_memory_without_encoder|src/run/config.cpp|  plan.insert(plan.end(), step.begin(), step.end());|  (void)step;|^cli\.bad_input\.batch_buffers_too_big$
step_memory_names_smallest|src/run/memory_plan.cpp|[](const MemoryPart& a, const MemoryPart& b) { return a.bytes < b.bytes; });|[](const MemoryPart& a, const MemoryPart& b) { return a.bytes > b.bytes; });|^cli\.bad_input\.batch_buffers_too_big$
activations_per_rank_not_per_image|src/run/memory_plan.cpp|                    bytes_per_float * images * size.saved_floats_per_image});|                    bytes_per_float * size.saved_floats_per_image});|^cli\.bad_input\.batch_buffers_too_big$
resnet_size_without_block_relu|src/model/resnet.cpp|keep_output();  // the ReLU after conv1|(void)0;  // the ReLU after conv1|^BackboneSizeTest\.
resnet_size_stride_ignored|src/model/resnet.cpp|    side = (side - 1) / stride + 1;|    side = side + 0 * stride;|^BackboneSizeTest\.
resnet_size_downsample_bn_missed|src/model/resnet.cpp|      size.parameters += static_cast<double>(in * out + 2 * out);|      size.parameters += static_cast<double>(in * out);|^BackboneSizeTest\.
vit_size_without_mlp_hidden|src/model/vit.cpp|  const double block_saved = (8 * d + 2 * hidden) * tokens|  const double block_saved = (8 * d + 0 * hidden) * tokens|^BackboneSizeTest\.
vit_size_without_attention|src/model/vit.cpp| + static_cast<double>(o.num_heads) * tokens * tokens;| + 0 * static_cast<double>(o.num_heads) * tokens * tokens;|^BackboneSizeTest\.
val_classes_unnamed|src/run/setup.cpp|  return text.empty() ? "none" : text;|  return "?";|^cli\.bad_input\.imagefolder_bad_folders$
uncommitted_save_read|src/ckpt/checkpoint_dir.cpp|  if (m[2].matched)
    throw CheckpointError(dir +|  if (false)
    throw CheckpointError(dir +|^ckpt\.tool_refusals$
manifest_step_unchecked|src/ckpt/checkpoint_dir.cpp|folder_step != manifest_step)|false)|^ckpt\.tool_refusals$
inspect_shards_unopened|src/app/moco_ckpt_main.cpp|  check_shards_open(reader);|  (void)0;|^ckpt\.tool_refusals$
diff_of_nothing_ok|src/app/moco_ckpt_main.cpp|differing == 0 && compared > 0 ? 0 : 1|differing == 0 ? 0 : 1|^ckpt\.tool_refusals$
diff_architectures_unsaid|src/app/moco_ckpt_main.cpp|  if (!arch_a.empty() && !arch_b.empty() && arch_a != arch_b)|  if (false)|^ckpt\.tool_refusals$
export_suffix_ignored|src/app/ckpt_export.cpp|    throw Refusal(fmt::format("export: OUT {} names another format|    if (false) throw Refusal(fmt::format("export: OUT {} names another format|^ckpt\.tool_refusals$
dry_run_resume_unverified|src/run/checkpointing.cpp|  ckpt::verify_checkpoint(dir, group_);|  (void)0;|^launch\.dry_run$|^ckpt\.damaged_refused$
export_deletion_unsaid|src/ckpt/export.cpp|  if (std::filesystem::exists(checkpoint_dir, ec)) return {};|  return {};|^tools\.export_races_retention$
pack_signal_in_commit_delivered|src/data/image_pack.cpp|    if (std::uncaught_exceptions() == 0) take_the_ones_that_came();|    (void)0;|^tools\.pack_signal_in_commit$
png_grey16_high_byte|src/data/image_decode.cpp|    samples[i] = static_cast<uint8_t>(std::min(value, 255u));|    samples[i] = static_cast<uint8_t>(value >> 8);|^data\.augment_parity_torchvision$
signal_after_last_step_unsaid|src/train/pretraining.cpp|  if (const int sig = preempt::preemption_signal(); sig != 0)|  if (const int sig = preempt::preemption_signal(); false)|^launch\.signal_after_last_step$
pretrained_formats_unsaid|src/lincls/frozen_backbone.cpp|in HDF5 (--format h5, the default; "|in HDF5 "|^ckpt\.tool_refusals$
skip_flag_ignores_loss|src/model/nonfinite.cpp|any_nonfinite(keys), holds_nonfinite(loss)};|any_nonfinite(keys), any_nonfinite(queries)};|^MocoTest\.|^faults\.nan_skip_loss$|^faults\.nan_skip_loss_v3$
skip_flag_ignores_grads|src/model/nonfinite.cpp|  bad.push_back(gradients_nonfinite.defined() ? gradients_nonfinite : torch::zeros_like(bad[0]));|  bad.push_back(torch::zeros_like(bad[0]));|^MocoTest\.|^faults\.nan_skip_grads$
skip_key_params_not_restored|src/model/step_rollback.cpp|  torch::where_out(momentum, keep_new, momentum, momentum_parameters_before_);|  (void)momentum;|^MocoTest\.|^faults\.nan_skip$|^MocoV3Test\.|^faults\.nan_skip_v3$
skip_flat_gradients_unchecked|src/optim/sgd.cpp|  if (gradients_bound()) return model::holds_nonfinite(grads_);|  if (gradients_bound()) return torch::zeros({}, torch::kBool);|^MocoTest\.|^faults\.nan_skip_grads$
nonfinite_misses_infinity|src/model/nonfinite.cpp|  return ends.sub(ends).isnan().any();|  return ends.isnan().any();|^NonfiniteTest\.
nan_hook_ignores_what|src/sys/fault_hooks.h|return step == at_step && rank == at_rank && what == target;|return step == at_step && rank == at_rank;|^FaultHooksTest\.
skip_causes_dropped|src/train/step_records.cpp|        report.skip_causes.push_back(static_cast<int32_t>(row[values + r]));|        report.skip_causes.push_back(0);|^StepRecordsTest\.|^faults\.nan_skip_loss$
ckpt_nonfinite_not_refused|src/ckpt/checkpoint.cpp|  auto refusal = nonfinite_state_error(state, step);|  std::string refusal;|^CkptCollective\.
nonfinite_check_refuses_progress|src/ckpt/checkpoint.cpp|state[i].name.rfind("progress/", 0) == 0)|false)|^CkptExport\.
epochs_steps_unbounded|src/train/training_run.cpp|  if (steps > kMostSteps)|  if (false)|^cli\.bad_input\.epochs_beyond_any_run$
thread_count_unbounded|src/run/config_keys.cpp|  if (v >= 0 && v <= kMostThreads) return "";|  if (v >= 0) return "";|^ConfigTest\.
override_text_unchecked|src/run/config.cpp|  const std::string typed = first == std::string::npos ? "" : text.substr(first, last - first + 1);|  const std::string typed = value.Scalar();|^ConfigTest\.
override_quotes_refused|src/run/config.cpp| && typed.back() == typed.front();| && false;|^ConfigTest\.
moco_sh_unknown_option_taken_as_config|launch/mpirun/moco.sh|    -*) echo "moco.sh: unknown option|    -no-such-option) echo "moco.sh: unknown option|^cli\.bad_input\.moco_sh_options$
moco_sh_hostfile_unchecked|launch/mpirun/moco.sh|{ echo "moco.sh: --hostfile '$hostfile': no such readable file" >&2; exit 2; }|true|^cli\.bad_input\.moco_sh_options$
sbatch_output_dir_cut_at_space|launch/slurm/moco.sbatch|    sub(/^ *output_dir: /, "")|    $0 = $2|^launch\.slurm_preempt_requeue_resume$
elastic_keeps_dead_host|launch/mpirun/elastic.sh|    if wait "${pids[i]}"; then|    if true; then|^multinode\.elastic_link_down$
elastic_restarts_after_stop|launch/mpirun/elastic.sh|  if [ -n "$stop_asked" ]; then|  if false; then|^launch\.elastic_no_restart_after_stop$
elastic_restarts_after_ranks_stopped|launch/mpirun/elastic.sh|  elif ranks_stopped_cleanly; then|  elif false; then|^launch\.elastic_no_restart_after_ranks_stopped$
elastic_resets_schedule|src/train/loop.cpp|  at_ = state_.restored_progress();|  at_ = state_.restored_progress(), at_.step = at_.epoch = at_.batch_in_epoch = 0;|^launch\.elastic_rank_killed$
elastic_resumes_oldest_checkpoint|launch/mpirun/elastic.sh|sort -V -r)|sort -V)|^launch\.elastic_rank_killed$
elastic_restarts_unbounded|launch/mpirun/elastic.sh|  elif [ "$restarts" -ge "$max_restarts" ]; then|  elif false; then|^launch\.elastic_rank_killed_twice$
elastic_resume_given_twice|launch/mpirun/elastic.sh|[[ $arg == train.resume=* ]]|false|^launch\.elastic_rank_killed$
elastic_restart_row_glued|launch/mpirun/elastic.sh|echo >>"$metrics"|true|^launch\.elastic_rank_killed$
elastic_world_ignores_batch|launch/mpirun/elastic.sh|[ $((batch % w)) -eq 0 ]|true|^launch\.elastic_world_divides_batch$
elastic_world_ignores_bn_splits|launch/mpirun/elastic.sh|[ $((bn_splits % w)) -eq 0 ]|true|^launch\.elastic_world_divides_bn_splits$
elastic_min_ranks_ignored|launch/mpirun/elastic.sh|  if [ "$world" -lt "$min_ranks" ]; then|  if false; then|^multinode\.elastic_min_ranks$
sbatch_restarts_unbounded|launch/slurm/moco.sbatch|    say "requeued after a failure, and no restart is left ($used of $max_restarts used): stopping"
    exit 1|    :|^launch\.elastic_sbatch_bound$
sbatch_restart_row_glued|launch/slurm/moco.sbatch|echo >>"$metrics"|true|^launch\.elastic_sbatch_bound$
sbatch_no_requeue_after_failure|launch/slurm/moco.sbatch|  requeue_after_failure "$rc"|  :|^multinode\.slurm_node_killed$
ckpt_unknown_subcommand_unnamed|src/app/moco_ckpt_main.cpp|    if (sub->get_name() == argv[1]) return "";|    if (true) return "";|^cli\.bad_input\.ckpt_unknown_subcommand$
earlier_metrics_truncated|src/run/run_output.cpp|  if (!append) keep_earlier_run_files(out_dir.string(), never, /*dry_run=*/false);|  (void)append;|^tools\.fresh_start_keeps_earlier_metrics$
earlier_metrics_suffix_reused|src/run/earlier_run.cpp|  while (taken(n)) ++n;|  (void)taken;|^tools\.fresh_start_keeps_earlier_metrics$
mnist_on_the_fashion_root_allowed|src/run/setup.cpp|  if (c.data.dataset == Dataset::kMnist && c.data.root == Config{}.data.root)|  if (false)|^cli\.bad_input\.mnist_on_the_fashion_root$
output_inside_split_allowed|src/run/setup.cpp|    if (sys::lies_within(c.train.output_dir, split))|    if (false)|^cli\.bad_input\.output_dir_inside_a_split$
v3_lars_adapts_vectors|src/optim/lars.cpp|if (p.dim() <= 1) return g;|if (p.dim() < 1) return g;|^MocoV3Test\.|^moco_v3\.step_parity_torch$
v3_warmup_skipped|src/train/schedule.cpp|  if (epoch < s.warmup_epochs) return s.peak_lr * epoch / s.warmup_epochs;|  (void)0;|^PaperConfigTest\.
v3_parity_vit_without_official_predictor|tests/parity/moco_v3_step_tool.cpp|     predictor_last_bn: true}|     predictor_last_bn: false}|^moco_v3\.step_parity_torch_vit$
syncbn_backward_local|src/model/sync_batchnorm.cpp|group->all_reduce(sums, dist::ReduceOp::kSum);|(void)sums;|^mpi\.np2$
syncbn_running_var_biased|src/model/sync_batchnorm.cpp|(stats.count / (stats.count - 1))|(stats.count / stats.count)|^SyncBatchNormTest\.|^DistSyncBatchNormTest\.
syncbn_between_ranks_dropped|src/model/sync_batchnorm.cpp| + (counts * (means - stats.mean).square()).sum(0)||^mpi\.np2$
syncbn_rank_means_unweighted|src/model/sync_batchnorm.cpp|(counts * means).sum(0) / stats.count|means.mean(0)|^mpi\.np2$
syncbn_sums_unshifted|src/model/sync_batchnorm.cpp|const auto shift = x.select(0, 0).reshape({c, -1}).select(1, 0);|const auto shift = torch::zeros({c}, x.options());|^DistSyncBatchNormTest\.
grad_scaler_tracker_kept_on_skip|src/model/grad_scaler.cpp|torch::where(skipped.logical_or(grow), torch::zeros_like(successful), successful)|torch::where(grow, torch::zeros_like(successful), successful)|^GradScalerTest\.
grad_scaler_grows_past_fp32|src/model/grad_scaler.cpp|grow & torch::isfinite(grown)|grow|^GradScalerTest\.
grad_scaler_growth_off_by_one|src/model/grad_scaler.cpp|const auto grow = successful.eq(options_.growth_interval);|const auto grow = growth_tracker_.eq(options_.growth_interval);|^GradScalerTest\.
grad_scaler_no_backoff|src/model/grad_scaler.cpp|torch::where(skipped, backed_off, after_good_step)|torch::where(skipped, scale_, after_good_step)|^GradScalerTest\.
grad_scaler_nan_missed|src/model/grad_scaler.cpp|found.push_back(holds_nonfinite(grad).reshape({1}));|found.push_back(grad.isinf().any().reshape({1}));|^GradScalerTest\.
syncbn_split_groups_synced|src/model/split_batchnorm.cpp|if (splits_ != 1)|if (false)|^SyncBatchNormTest\.
lincls_cosine_ignored|src/train/schedule.cpp|  s.kind = config.lincls.schedule;|  s.kind = run::Schedule::kStep;|^LinclsProtocolTest\.
v3_config_lr_drifts|configs/moco_v3_r50_imagenet.yaml|  base_lr: 0.6 |  base_lr: 0.45 |^PaperConfigTest\.
v3_adamw_decay_off|src/optim/adamw.cpp|auto moved = p.mul(1.0 - lr_ * weight_decay_);|auto moved = p.mul(1.0);|^moco_v3\.step_parity_torch_adamw$|^AdamWTest\.
v3_adamw_no_bias_correction|src/optim/adamw.cpp|torch::full({}, lr_, t_wide.options()).div_(torch::pow(kBeta1, t_wide).neg_().add_(1.0))|torch::full({}, lr_, t_wide.options())|^moco_v3\.step_parity_torch_adamw$|^AdamWTest\.
adamw_step_counted_on_skip|src/optim/adamw.cpp|  keep_where(steps_, t, apply);|  steps_.copy_(t);|^AdamWTest\.
adamw_moment_moves_on_skip|src/optim/adamw.cpp|    keep_where(exp_avg_sq_[i], v, apply);|    exp_avg_sq_[i].copy_(v);|^AdamWTest\.
adamw_bias_correction_in_float|src/optim/adamw.cpp|  const auto t_wide = t.to(torch::kDouble);|  const auto t_wide = t.to(torch::kFloat);|^AdamWTest\.
lars_buffer_moves_on_skip|src/optim/lars.cpp|    keep_where(buffers_[i], buffer, apply);|    buffers_[i].copy_(buffer);|^LarsTest\.
optimizer_skip_ignores_apply|src/optim/masked_update.h|    torch::where_out(target, apply, value, target);|    target.copy_(value);|^LarsTest\.|^AdamWTest\.|^OptimizerTest\.
optimizer_gradients_unchecked|src/optim/optimizer.cpp|  return model::holds_nonfinite(gradients());|  return torch::zeros({}, torch::kBool);|^OptimizerTest\.
nonfinite_many_ignores_maxima|src/model/nonfinite.cpp|    ends.push_back(hi);|    (void)hi;|^NonfiniteTest\.
v3_adamw_steps_not_checkpointed|src/optim/optimizer.cpp|    state.emplace_back("steps", adamw_->steps());|    (void)0;|^moco_v3\.step_parity_torch_adamw$
skip_flag_not_agreed|src/model/nonfinite.cpp|group.all_gather(local_causes.view({1}))|local_causes.view({1}).repeat({group.world_size()})|^faults\.nan_skip_loss_v3$|^faults\.nan_skip_loss$
nan_injection_unwired|src/run/momentum_method.cpp|context_(context), nan_(sys::hooks().nan_injection()) {}|context_(context), nan_() {}|^MocoV3Test\.|^faults\.nan_skip_v3$|^faults\.nan_skip$
grad_scaler_apply_ignored|src/model/grad_scaler.cpp|    new_scale = torch::where(keep, new_scale, scale_);|    (void)keep;|^MocoV3Test\.
grad_scaler_tracker_apply_ignored|src/model/grad_scaler.cpp|    new_tracker = torch::where(keep, new_tracker, growth_tracker_);|    (void)0;|^MocoV3Test\.
fp16_accepted_on_cpu|src/run/device.cpp|device.is_cuda(), where, "train.precision",|true, where, "train.precision",|^MocoV3Test\.|^moco_v3\.cli\.fp16_needs_cuda$|^cli\.train\.v3_r50_config_np2$
fp16_resume_switch_allowed|src/run/config.cpp|  return key == "train.precision" && (before == "fp16") != (after == "fp16");|  return false;|^MocoV3Test\.
fp16_cpu_autocast_accepted|src/model/autocast.cpp|  if (dtype == c10::ScalarType::Half && type_ == c10::DeviceType::CPU)|  if (false)|^PrecisionTest\.
paper_configs_not_fp16|configs/moco_v3_vit_small_imagenet.yaml|  precision: fp16 |  precision: bf16 |^PaperConfigTest\.
paper_r50_config_not_fp16|configs/moco_v3_r50_imagenet.yaml|  precision: fp16 |  precision: fp32 |^PaperConfigTest\.
vit_pos_embed_trainable|src/model/vit.cpp|/*requires_grad=*/false);|/*requires_grad=*/true);|^VitTest\.|^MocoV3Test\.
vit_patch_projection_trainable|src/model/vit.cpp|    patch_proj->weight.requires_grad_(false);|    (void)0;|^VitTest\.|^MocoV3Test\.
vit_small_six_heads|src/model/vit.cpp|    o.num_heads = 12;               // vits.py's ViT-S|    o.num_heads = 6;               // vits.py's ViT-S|^VitTest\.
vit_cls_token_not_prepended|src/model/vit.cpp|  tokens = torch::cat({cls_token.expand({tokens.size(0), -1, -1}), tokens}, 1) + pos_embed;|  tokens = tokens + pos_embed.narrow(1, 1, tokens.size(1));|^VitTest\.
vit_features_not_the_cls_token|src/model/vit.cpp|  return norm(tokens).select(1, 0);|  return norm(tokens).mean(1);|^VitTest\.
vit_sincos_coordinates_swapped|src/model/vit.cpp|  const auto first = coords[0].flatten()|  const auto first = coords[1].flatten()|^VitTest\.
vit_qkv_init_as_one_linear|src/model/vit.cpp|xavier_uniform(linear->weight, in, qkv ? out / 3 : out);|xavier_uniform(linear->weight, in, out);|^VitTest\.
vit_attention_scale_of_whole_dim|src/model/vit.cpp|        scale_(1.0 / std::sqrt(static_cast<double>(dim / heads))),|        scale_(1.0 / std::sqrt(static_cast<double>(dim))),|^moco_v3\.step_parity_torch_vit$
v3_vit_projector_two_layers|configs/moco_v3_vit_small_imagenet.yaml|  projector_layers: 3 |  projector_layers: 2 |^PaperConfigTest\.
v3_vit_config_temperature_drifts|configs/moco_v3_vit_base_imagenet.yaml|  temperature: 0.2 |  temperature: 1.0 |^PaperConfigTest\.
vit_lincls_head_read|src/lincls/frozen_backbone.cpp|      if (!starts_with(key, head_prefix)) source.tensors.emplace(key, reader.read(key));|      source.tensors.emplace(key, reader.read(key));|^LinclsTest\.
vit_lincls_head_is_fc|src/lincls/frozen_backbone.cpp|{ return net.head_name() + "."; }|{ return std::string("fc."); }|^LinclsTest\.|^lincls\.v3_vit_tiny_np2$
vit_lincls_tensor_not_loaded|src/lincls/frozen_backbone.cpp|for (auto& [key, tensor] : backbone_tensors(*b.net_)) tensor.copy_(source.tensors.at(key));|for (auto& [key, tensor] : backbone_tensors(*b.net_)) if (key != "cls_token") tensor.copy_(source.tensors.at(key));|^LinclsTest\.|^lincls\.v3_vit_tiny_np2$
vit_lincls_sanity_skips_vit|src/lincls/frozen_backbone.cpp|  if (!net_) return 0;|  if (!net_) return 0;  if (run::is_vit(c.model.arch)) return 0;|^LinclsTest\.|^lincls\.v3_vit_tiny_np2$
vit_lincls_mismatch_names_no_image_size|src/lincls/frozen_backbone.cpp|return fmt::format("model.arch={} data.image_size={}", c.model.arch, c.data.augment.out_size);|return fmt::format("model.arch={}", c.model.arch);|^LinclsTest\.|^lincls\.v3_vit_tiny_np2$
vit_lincls_small_lr_drifts|configs/moco_v3_lincls_vit_small_imagenet.yaml|  base_lr: 3 |  base_lr: 0.1 |^LinclsProtocolTest\.
vit_lincls_base_batch_drifts|configs/moco_v3_lincls_vit_base_imagenet.yaml|  batch_size: 1024|  batch_size: 4096|^LinclsProtocolTest\.
accepted_choices_unchecked|src/run/config.cpp|    if (std::find(accepted.begin(), accepted.end(), value) != accepted.end()) return;|    return;|^ConfigTest\.
accepted_precision_unchecked|src/run/config.cpp|  refuse("train.precision", c.train.precision, room.accepts.precisions, "trains in");|  (void)refuse;|^ConfigTest\.
accepted_choices_not_in_help|src/run/config_keys.cpp|    if (f.key == "optim.optimizer") f.help += accepted_help(|    if (false) f.help += accepted_help(|^ConfigTest\.|^docs\.config_reference_current$
v3_vit_export_keeps_head|src/app/ckpt_export.cpp|std::vector<std::string>{"fc.", "head."}|std::vector<std::string>{"fc."}|^cli\.train\.v3_vit_small_config_np2$
v3_solarize_threshold_129|src/data/pil_color.cpp|constexpr int kThreshold = 128;|constexpr int kThreshold = 129;|^PilColorTest\.|^data\.augment_parity_torchvision$
v3_solarize_before_blur|src/data/view_augment.cpp|    if (p.blur) ops.blur(view, p.sigma);
    if (p.solarize && recipe == Recipe::kV3) ops.solarize(view);|    if (p.solarize && recipe == Recipe::kV3) ops.solarize(view);
    if (p.blur) ops.blur(view, p.sigma);|^ViewAugmentTest\.|^data\.augment_parity_torchvision$
v3_solarize_in_v2|src/data/view_augment.cpp|if (p.solarize && recipe == Recipe::kV3) ops.solarize(view);|if (p.solarize) ops.solarize(view);|^ViewAugmentTest\.|^data\.augment_parity_torchvision$
v3_view_probabilities_swapped|src/data/augment.cpp|options.recipe == Recipe::kV3 && view == 1|options.recipe == Recipe::kV3 && view == 0|^ViewParamsTest\.|^PaperConfigTest\.|^data\.augment_parity_torchvision$
v3_query_view_solarized|src/data/loader.cpp|augment_batch(images, options_of_view(augment, 0), query_seeds, view_type)|augment_batch(images, options_of_view(augment, 1), query_seeds, view_type)|^ViewAugmentTest\.
v3_encoded_key_view_as_query|src/data/encoded_views.cpp|k = draw_view_params(*key_seed, full.height, full.width, options_of_view(o, 1));|k = draw_view_params(*key_seed, full.height, full.width, o);|^ImageFolderTest\.
v3_never_blurs|src/data/view_params.cpp|o.recipe == Recipe::kV3) && blur_gate;|o.recipe == Recipe::kV1) && blur_gate;|^ViewParamsTest\.|^PaperConfigTest\.|^data\.augment_parity_torchvision$
v3_solarize_gate_before_flip|src/data/view_params.cpp|  p.flip = detail::uniform01(rng) < o.flip_prob;|  const bool gate_in_pipeline_order = detail::uniform01(rng) < o.solarize_prob;
  (void)gate_in_pipeline_order;
  p.flip = detail::uniform01(rng) < o.flip_prob;|^ViewAugmentTest\.
v3_config_blur_stand_in|configs/moco_v3_r50_imagenet.yaml|  blur_prob: 1.0 |  blur_prob: 0.5 |^PaperConfigTest\.
v3_view_keys_accepted_elsewhere|src/run/config.cpp|  if (a.recipe == data::Recipe::kV3) return;|  return;|^cli\.bad_input\.v3_augmentation_keys$
v3_vit_config_v2_augmentation|configs/moco_v3_vit_small_imagenet.yaml|  augmentation: v3 |  augmentation: v2 |^PaperConfigTest\.
v3_r50_1000ep_momentum_default|configs/moco_v3_r50_1000ep_imagenet.yaml|  momentum: 0.996 |  momentum: 0.99 |^PaperConfigTest\.
v3_config_key_solarize_drifts|configs/moco_v3_r50_imagenet.yaml|  key_solarize_prob: 0.2 |  key_solarize_prob: 0.1 |^PaperConfigTest\.
uint8_normalize_order|src/run/device_batches.cpp|pixels.to(torch::kFloat).div_(scale_).sub_(mean_).div_(std_)|pixels.to(torch::kFloat).sub_(mean_).div_(scale_).div_(std_)|^PixelNormalizerTest\.|^Uint8ViewsTest\.
uint8_normalize_by_reciprocal|src/run/device_batches.cpp|.div_(scale_)|.mul_(1.0f / scale_)|^PixelNormalizerTest\.|^Uint8ViewsTest\.
uint8_normalize_first_channel_only|src/run/device_batches.cpp|static_cast<size_t>(count == 1 ? 0 : c)|static_cast<size_t>(0)|^PixelNormalizerTest\.|^Uint8ViewsTest\.
device_batches_staged_kept_at_start_epoch|src/run/device_batches.cpp|  staged_.reset();|  (void)0;|^DeviceBatchesTest\.
device_batches_end_kept_at_start_epoch|src/run/device_batches.cpp|  epoch_ended_ = false;|  (void)0;|^DeviceBatchesTest\.
device_batches_hand_out_the_next|src/run/device_batches.cpp|  std::unique_ptr<Staged> current = std::move(staged_);
  staged_ = fetch_ahead();|  staged_ = fetch_ahead();
  std::unique_ptr<Staged> current = std::move(staged_);|^DeviceBatchesTest\.
device_batches_error_a_batch_early|src/run/device_batches.cpp|  staged_ = fetch_ahead();|  staged_ = fetch();|^DeviceBatchesTest\.
device_batches_error_kept_at_start_epoch|src/run/device_batches.cpp|  failed_ = nullptr;|  (void)0;|^DeviceBatchesTest\.
uint8_views_ignored|src/data/loader.cpp|options.uint8_views ? torch::kUInt8 : torch::kFloat|torch::kFloat|^Uint8ViewsTest\.|^DeviceBatchesTest\.
uint8_views_simple_loader_accepted|src/data/loader.cpp|if (options.uint8_views && augment.recipe == Recipe::kSimple)|if (false)|^Uint8ViewsTest\.
uint8_views_simple_batch_accepted|src/data/augment.cpp|if (view_type == torch::kUInt8 && recipe == Recipe::kSimple)|if (false)|^Uint8ViewsTest\.
uint8_views_on_cpu|src/train/training_run.cpp|return device.is_cuda() && recipe != data::Recipe::kSimple;|return recipe != data::Recipe::kSimple;|^Uint8ViewsTest\.
uint8_views_for_simple|src/train/training_run.cpp|return device.is_cuda() && recipe != data::Recipe::kSimple;|return device.is_cuda();|^Uint8ViewsTest\.
other_method_key_accepted|src/run/config.cpp|    if (f->method.empty()|    if (true|^moco_v2\.cli\.keys_refused_elsewhere$|^ConfigTest\.
saved_other_method_keys_refused|src/run/config.cpp|settle_method(keys, reading, *methods, /*drop_others=*/true, where);|settle_method(keys, reading, *methods, /*drop_others=*/false, where);|^golden\.resume_v2_pre_rooms$|^golden\.resume_v3_pre_rooms$
method_keys_listed_out_of_place|src/run/config_keys.cpp|      while (place != fields.end() && !place->method.empty()) ++place;|      (void)0;|^docs\.config_reference_current$
method_keys_free_on_resume|src/run/config.cpp|if (!f.method.empty()) return job == Job::kMoco && f.resume_must_match;|if (!f.method.empty()) return false;|^ConfigTest\.
step_scalar_not_in_epoch_line_only|src/train/train_log.cpp|scalars[i].in_epoch_line)|true)|^cli\.train\.imagefolder_np1_np2$
lincls_loss_not_weighted_by_images|src/train/step_meter.h|      loss_x_images += report.loss * static_cast<double>(report.images);|      loss_x_images += report.loss;|^golden\.lincls_np2$
lincls_epoch_loss_not_resumed|src/lincls/lincls.cpp|    epoch.loss_x_images = state.value("epoch_loss_sum");|    (void)0;|^lincls\.resume_bitwise$
lincls_partial_epoch_reported|src/lincls/lincls.cpp|  if (!end.complete) return false;|  (void)0;|^lincls\.resume_bitwise$
tool_refusal_exits_1|src/app/program.cpp|    return is_refusal && is_refusal(e) ? 2 : 1;|    return 1;|^cli\.bad_input\.imagefolder_bad_folders$|^tools\.
unknown_method_accepted|src/run/config_keys.cpp|    if (methods[i].name == name) return "";|    if (true) return "";|^cli\.bad_input\.unknown_method$
zero_init_residual_key_unwired|src/run/setup.cpp|  e.zero_init_residual = c.model.zero_init_residual;|  (void)0;|^ConfigTest\.
zero_init_residual_with_vit_accepted|src/run/config.cpp|!is_vit(c.model.arch), where, "model.zero_init_residual",|true, where, "model.zero_init_residual",|^ConfigTest\.
v3_r50_config_zero_init_drifts|configs/moco_v3_r50_imagenet.yaml|  zero_init_residual: true |  zero_init_residual: false |^PaperConfigTest\.
v3_vit_config_predictor_bn_drifts|configs/moco_v3_vit_small_imagenet.yaml|  predictor_last_bn: true |  predictor_last_bn: false |^PaperConfigTest\.
lincls_pin_hash_unchecked|src/lincls/backbone_pin.cpp|  if (backbone.content_hash() != pin->hash)|  if (false)|^lincls\.pinned_backbone$
lincls_pin_latest_followed|src/lincls/backbone_pin.cpp|  if (now != pin->source) pinned.model.pretrained = pin->source;|  (void)0;|^lincls\.pinned_backbone$
lincls_pin_gone_unchecked|src/lincls/backbone_pin.cpp|  if (!fs::exists(pin->source, ec)) throw refusal(pin->source + " is gone");|  (void)0;|^lincls\.pinned_backbone$
lincls_pin_not_kept|src/lincls/backbone_pin.cpp|  checkpointing.keep_note(kPretrainedNote, pin.dump());|  (void)pin;|^lincls\.pinned_backbone$
lincls_arch_not_first|src/lincls/frozen_backbone.cpp|  if (!source.arch.empty() && source.arch != run::to_string(c.model.arch))|  if (false)|^lincls\.v3_vit_tiny_np2$
resume_on_changed_data_always|src/run/resume_data.cpp|  if (!config.train.resume_on_changed_data)|  if (false)|^data\.resume_changed_data$
resume_data_not_kept|src/run/checkpointing.cpp|  info.notes = notes_;|  (void)0;|^data\.resume_changed_data$
resume_data_fingerprint_ignored|src/run/resume_data.cpp|  if (change.empty()) return;|  return;|^data\.resume_changed_data$
ranks_data_not_compared|src/run/data_agreement.cpp|      if (!torch::equal(all[r].narrow(0, base, kWords), all[0].narrow(0, base, kWords))) differing.push_back(r);|      (void)r;|^data\.ranks_disagree$
ranks_bisection_inverted|src/run/data_agreement.cpp|== as_word(prefix[static_cast<size_t>(ask)]) ? lo : hi) = ask;|== as_word(prefix[static_cast<size_t>(ask)]) ? hi : lo) = ask;|^data\.ranks_disagree$
fingerprint_blocks_never_exact|src/data/fingerprint.cpp|    if (then.block == 1)|    if (false)|^DataFingerprint\.
fingerprint_ignores_size|src/data/fingerprint.cpp|  uint64_t h = detail::hash_combine(text_hash(e.path), static_cast<uint64_t>(e.size));|  uint64_t h = text_hash(e.path);|^DataFingerprint\.
fingerprint_ignores_label|src/data/fingerprint.cpp|  h = detail::hash_combine(h, static_cast<uint64_t>(e.label));|  (void)0;|^DataFingerprint\.|^data\.ranks_disagree$
file_list_cache_drops_sizes|src/data/file_list_cache.cpp|out << f.labels[i] << ' ' << f.sizes[i] << ' ' << f.files[i] << '\n';|out << f.labels[i] << ' ' << 0 << ' ' << f.files[i] << '\n';|^ImageFolderScan\.
scan_drops_sizes|src/data/image_folder.cpp|size_ec ? int64_t{-1} : static_cast<int64_t>(size));|int64_t{0});|^ImageFolderScan\.|^Shards/ImageShardsTest\.
shard_listing_drops_sizes|src/data/image_shards.cpp|  return {paths_[i], sizes_[i], labels_[i]};|  return {paths_[i], 0, labels_[i]};|^Shards/ImageShardsTest\.
idx_listing_content_unread|src/data/idx.cpp|      crc = crc32(crc, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(in.gcount()));|      (void)crc;|^IdxTest\.
manifest_notes_dropped|src/ckpt/manifest.cpp|    for (const auto& [name, text] : notes.items()) m.notes[name] = text.get<std::string>();|    (void)notes;|^CkptManifest\.|^CkptCollective\.
dry_run_writes_file_list_in_output_dir|src/data/file_list_cache.cpp|  const size_t writable = write_extra_dirs ? paths.size() : 1;|  const size_t writable = paths.size();|^FileListCacheTest\.|^data\.dry_run_read_only$
dry_run_main_allows_output_dir|src/app/program.cpp|/*file_list_in_output_dir=*/p.writes_output|/*file_list_in_output_dir=*/true|^data\.dry_run_read_only$
file_list_failed_rename_kept|src/data/file_list_cache.cpp|  fs::remove(tmp, ec);  // clears ec: the rename's failure is the answer
  return false;|  fs::remove(tmp, ec);
  return !ec;|^FileListCacheTest\.
loop_epoch_meter_reset_when_stopped|src/train/loop.cpp|  if (end.complete) book_->epoch.reset();|  book_->epoch.reset();|^lincls\.resume_bitwise$
moco_sh_rank_count_wraps|launch/mpirun/moco.sh|[0-9]{0,7})$ ]] && [ "${BASH_REMATCH[1]}" -le "$max_ranks" ]|[0-9]*)$ ]]|^cli\.bad_input\.moco_sh_ranks$
export_detectron2_vit_accepted|src/app/ckpt_export.cpp|  check_detectron2_arch(dir, format);|  (void)format;|^tools\.export_vit_detectron2$
diff_nan_unequal|src/app/moco_ckpt_main.cpp|  if (a.is_floating_point()) differs &= ~(a.isnan() & b.isnan());|  (void)0;|^ckpt\.diff_itself$
diff_nan_equals_number|src/app/moco_ckpt_main.cpp|differs &= ~(a.isnan() & b.isnan());|differs &= ~(a.isnan() + b.isnan());|^ckpt\.diff_itself$
fresh_start_tb_shared|src/run/earlier_run.cpp|const char* const kEarlierRunFiles[] = {"checkpoints", "metrics.jsonl", "config.yaml", "tb"};|const char* const kEarlierRunFiles[] = {"checkpoints", "metrics.jsonl", "config.yaml"};|^tools\.fresh_start_keeps_earlier_metrics$
fresh_start_lone_config_overwritten|src/run/earlier_run.cpp|  if (name == "config.yaml") return fs::exists(path, ec);|  if (name == "config.yaml") return fs::exists(path, ec) && fs::exists(out_dir / "metrics.jsonl", ec);|^tools\.fresh_start_keeps_earlier_metrics$
fresh_start_suffix_of_metrics_only|src/run/earlier_run.cpp|      if (std::filesystem::exists(std::filesystem::path(out_dir) / (name + "." + std::to_string(n)), ec)) return true;|      if (name == "metrics.jsonl" && std::filesystem::exists(std::filesystem::path(out_dir) / (name + "." + std::to_string(n)), ec)) return true;|^tools\.fresh_start_keeps_earlier_metrics$
never_keeps_checkpoints_in_place|src/run/run_output.cpp|  const bool never = config.train.resume == "never";|  const bool never = false;|^ckpt\.damaged_refused$|^ckpt\.refusals$
damaged_checkpoints_start_fresh|src/run/checkpointing.cpp|  if (!skipped_.empty()) throw ConfigError(none_loads());|  (void)0;|^ckpt\.damaged_refused$
damaged_at_load_starts_fresh|src/run/checkpointing.cpp|  if (!candidates_.empty()) throw ConfigError(none_loads());|  if (false) throw ConfigError(none_loads());|^ckpt\.damaged_refused$
output_dir_in_checkpoints_accepted|src/run/run_output.cpp|    if (p.filename() == "checkpoints" && holds_checkpoints(p))|    if (false)|^tools\.output_dir_misplaced_np1$
output_dir_in_running_run_accepted|src/run/run_output.cpp|      if (const auto holder = sys::lock_holder(p.string()))|      if (const auto holder = std::optional<std::string>())|^tools\.output_dir_misplaced_np1$
output_dir_misplaced_dry_run_accepted|src/run/run_output.cpp|    refuse_misplaced(out_dir.string(), "train.output_dir", rank);|    (void)0;|^tools\.output_dir_misplaced_np1$
lock_probe_kept|src/sys/folder_lock.cpp|  ::close(fd);  // drops the probe's shared lock, if it got one|  if (!holder) return holder;|^FolderLockTest\.
lock_twin_per_process|src/sys/folder_lock.cpp|  guard_path_ = in_folder(folder, kFolderGuardName);|  guard_path_ = in_folder(folder, kFolderGuardName) + std::to_string(::getpid());|^tools\.lock_removed_np1$
lock_loss_unseen|src/sys/folder_lock.cpp|still_at_path(fd_, path_)) return std::nullopt;|true) return std::nullopt;|^FolderLockTest\.|^tools\.lock_removed_np1$
lock_taken_not_told|src/sys/folder_lock.cpp|  if (const auto holder = holder_of(path_)) return Loss{|  if (const auto holder = std::optional<std::string>()) return Loss{|^FolderLockTest\.|^tools\.lock_removed_np1$
lock_loss_does_not_stop|src/run/run_output.cpp|    preempt::request_stop(SIGUSR1);|    (void)0;|^tools\.lock_removed_np1$
lock_taken_stops_with_checkpoint|src/run/run_output.cpp|    if (loss->taken)|    if (false)|^tools\.lock_removed_np1$
lock_unwatched|src/run/run_output.cpp|    if (lock.held()) watch_lock(lock, output_dir, key);|    (void)0;|^tools\.lock_removed_np1$
lock_probe_refuses_a_start|src/sys/folder_lock.cpp|    if (error != EWOULDBLOCK|    if (true|^FolderLockTest\.
lock_release_removes_anothers|src/sys/folder_lock.cpp|  if (still_at_path(fd, path)) ::unlink(path.c_str());|  ::unlink(path.c_str());|^FolderLockTest\.|^tools\.lock_removed_np1$
layers_missing_header_passes|tests/layers/refuse_upward_include.py|    failures += len(gone)|    failures += 0|^build\.layers_case_of_a_missing_header_fails$
suites_listing_drops_one|tests/gtest_suites.cmake|  if(suite MATCHES "^DISABLED_")|  if(suite MATCHES "^(DISABLED_)?Mpi")|^style\.test_labels$
suite_entry_left_unlabelled|tests/CMakeLists.txt|  set_tests_properties(${test} PROPERTIES LABELS "${labels}")|  set_tests_properties(${test} PROPERTIES LABELS "")|^style\.test_labels$
LIST
)
# Each method room's own mutants, in its tests folder (tests/<room>/mutants, the same format), so
# that a new method adds its list beside its tests and edits nothing here.
for room_list in "$repo"/tests/*/mutants; do
  [ -f "$room_list" ] && mutants+=$'\n'$(grep -v '^#' "$room_list")
done

# Mutants span lines: a record is a line that starts with a name and a '|', continued by lines that don't.
records=$(printf '%s\n' "$mutants" | awk '/^[a-z_0-9]+\|/{if(r!="")printf "%s\036",r; r=$0; next} {r=r"\n"$0} END{if(r!="")printf "%s\036",r}')

if $check_only; then
  printf '%s' "$records" | /usr/bin/python3 -c '
import re
import sys
bad = 0
records = [r.strip("\n") for r in sys.stdin.read().split("\036") if r.strip()]
for record in records:
    name, path, old, new, *tests = record.split("|")
    # A bar inside a text would shift the fields: every test field is a ctest regex anchored with ^.
    if not tests or not all(t.startswith("^") for t in tests):
        print(f"MALFORMED  {name}: after the replacement, every field must be a ctest regex starting with ^ (a bar in a text?)")
        bad += 1
        continue
    # ctest runs a GoogleTest suite as one entry, "Suite.*": a regex naming a case would match none.
    cases = [t for t in tests if re.match(r"\^[A-Z][A-Za-z0-9_/]*\\\.(?!\*)[^$]", t)]
    if cases:
        print(f"MALFORMED  {name}: {cases[0]} names a GoogleTest case; the ctest entries are suites (^Suite\\.)")
        bad += 1
        continue
    try:
        count = open(sys.argv[1] + "/" + path).read().count(old)
    except OSError:
        count = "no such file:"
    if count != 1:
        print(f"NOT APPLICABLE  {name}: its text occurs {count} times in {path}")
        bad += 1
print(f"mutants: {len(records)}, applicable: {len(records) - bad}")
sys.exit(1 if bad else 0)' "$repo"
  exit
fi
mkdir -p "$src" "$log"
# A run cut short may have left a mutated file beside its original: put it back first.
find "$src" -name '*.orig' 2>/dev/null | while IFS= read -r orig; do mv "$orig" "${orig%.orig}" && touch "${orig%.orig}"; done
# Only files whose content differs are copied, with a new mtime, so the scratch build stays incremental.
echo "copying $repo to $src"
(cd "$repo" && git ls-files -co --exclude-standard) | while IFS= read -r f; do
  if [ -f "$repo/$f" ] && ! cmp -s "$repo/$f" "$src/$f"; then
    mkdir -p "$src/$(dirname "$f")" && cp "$repo/$f" "$src/$f"
  fi
done
# Without the unity build a mutant recompiles its one file, not the batch of eight it would share.
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOCO_UNITY_BUILD=OFF >"$log/cmake.log" 2>&1 ||
    { cat "$log/cmake.log"; exit 2; }
fi
# Every executable a ctest entry runs (tests/CMakeLists.txt and the scripts it calls), so that none
# of them keeps the unmutated code; moco_tests_suites lists the GoogleTest suites as ctest entries.
targets=(--target moco_tests moco_tests_suites moco_dist moco_ckpt moco_lincls moco_pack moco_augment_parity_tool moco_v3_step_tool openblas_probe bench_data)
echo "building the unmutated tree in $build"
cmake --build "$build" "${targets[@]}" >"$log/build.log" 2>&1 || { tail -30 "$log/build.log"; exit 2; }

survived=0 broken=0 total=0
IFS=$'\036' read -r -d '' -a list <<<"$records"
for record in "${list[@]}"; do
  [ -n "${record//[$'\n ']/}" ] || continue
  name=${record%%|*}
  [[ $name =~ $only ]] || continue
  total=$((total + 1))
  status=$(/usr/bin/python3 - "$src" "$record" <<'PY'
import shutil, sys
src, record = sys.argv[1], sys.argv[2].strip("\n")
name, path, old, new, *tests = record.split("|")
full = f"{src}/{path}"
text = open(full).read()
if text.count(old) != 1:
    print(f"NOAPPLY\t{path}\t{text.count(old)}"); sys.exit()
open(full + ".orig", "w").write(text)
shutil.copymode(full, full + ".orig")  # the original goes back with its mode (a script stays executable)
open(full, "w").write(text.replace(old, new))
print(f"APPLIED\t{path}\t" + "|".join(tests))
PY
)
  IFS=$'\t' read -r state file regex <<<"$status"
  if [ "$state" != APPLIED ]; then
    line="NOT APPLIED  $name ($file: the text occurs $regex times)"
    echo "$line"
    broken=$((broken + 1))
    continue
  fi
  start=$(date +%s)
  if ! cmake --build "$build" "${targets[@]}" >"$log/$name.build.log" 2>&1; then
    verdict="NO BUILD    "
    broken=$((broken + 1))
  elif ctest --test-dir "$build" -R "$regex" --output-on-failure --no-tests=error >"$log/$name.test.log" 2>&1; then
    verdict="SURVIVED    "
    survived=$((survived + 1))
  elif grep -q 'No tests were found' "$log/$name.test.log"; then
    # A regex that names no entry would otherwise read as a kill.
    verdict="NO TESTS    "
    broken=$((broken + 1))
  else
    verdict="KILLED      "
  fi
  failed=$(grep -E '^\s+[0-9]+ - ' "$log/$name.test.log" 2>/dev/null | grep -v '(Skipped)' | sed -E 's/^\s+[0-9]+ - //; s/ \(.*//' | head -4 | paste -sd, -)
  # Put the file back with a new mtime, so that the next build recompiles it.
  mv "$src/$file.orig" "$src/$file" && touch "$src/$file"
  line="$verdict $name ($file; ran -R '$regex'; $(( $(date +%s) - start ))s)${failed:+; failed: $failed}"
  echo "$line"
done
echo "rebuilding the unmutated tree"
cmake --build "$build" "${targets[@]}" >"$log/build.log" 2>&1 || tail -30 "$log/build.log"
echo
echo "mutants: $total, killed: $((total - survived - broken)), survived: $survived, not applied, not built or matching no test: $broken (logs in $log)"
[ "$survived" -eq 0 ] && [ "$broken" -eq 0 ]
