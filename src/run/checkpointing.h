// defines: Checkpointing, the run's checkpoint policy: which checkpoint a run resumes from (and whether
// its config allows it), when it saves, and retention. The checkpoint format lives in src/ckpt.
#pragma once

#include "ckpt/async_saver.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "dist/process_group.h"
#include "run/config.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moco::run {

struct SavedCheckpoint {
  std::string path;    // committed, or (ckpt.async) to be committed by the writer thread
  double seconds = 0;  // the run was blocked this long
  int64_t bytes = 0;   // written by all ranks together
};

class Checkpointing {
 public:
  // Decides what to resume from, before any data is loaded or model built or anything written: the
  // newest checkpoint that loads (every tensor read against its checksums, on all ranks together). A
  // resume path that is no committed checkpoint, a checkpoint whose saved config differs in a key that
  // changes the math (or in the global batch), or train.resume=auto over checkpoints of which none
  // loads (naming each and why) throw ConfigError; train.resume=never resumes nothing (open_run_output
  // keeps the checkpoints there aside). Every rank agrees on the candidates (rank 0's listing). `job`
  // says which keys change the math and which global batch must stay the same.
  Checkpointing(const Config& config, dist::ProcessGroup& group, Job job = Job::kMoco);

  const std::string& root() const { return root_; }  // <train.output_dir>/checkpoints
  bool will_try_resume() const { return !candidates_.empty(); }
  const std::string& first_candidate() const { return candidates_.front(); }
  // Rank 0, before anything is written (run/later_steps.h): the folder's step folders past the
  // candidate, which this run's saves would replace, kept aside (damaged ones under auto, a fork's
  // timeline otherwise); a dry run says what it would do.
  void keep_later_steps_aside(bool dry_run) const;

  // Restores `state` from the newest candidate that loads and returns its folder; under
  // train.resume=auto a corrupt or incomplete one is skipped with a warning saying why and the one
  // before it is tried; if none loads, ConfigError as in the constructor. nullopt: nothing to resume,
  // start fresh. Collective.
  std::optional<std::string> resume(const std::vector<ckpt::StateEntry>& state);
  // The dry run's answer: the candidate resume() would restore from, as the constructor found it (the
  // saved config checked, every tensor read against its checksums, nothing loaded), logging what
  // resume() would of it (changed keys, changed data); each candidate it would skip is added to
  // `skipped` with why. nullopt: a fresh start.
  std::optional<std::string> would_resume_from(std::vector<std::string>& skipped) const;

  // Whether the step just finished should be checkpointed (ckpt.every_steps, ckpt.every_minutes of
  // training time); the same answer on every rank, since all share rank 0's clock.
  bool due(int64_t step, double train_seconds) const;
  bool saved_at(int64_t step) const { return last_saved_step_ == step; }
  // The cadence counts from here (a resumed run's restored step and training time).
  void mark_saved(int64_t step, double train_seconds) {
    last_saved_step_ = step;
    last_saved_seconds_ = train_seconds;
  }
  // Collective save, then retention (rank 0); with ckpt.async the writing and the retention go on
  // in the background.
  SavedCheckpoint save(const std::vector<ckpt::StateEntry>& state, int64_t step, double epoch, double train_seconds);
  // Collective: the background save, if any, is committed (or its failure thrown on every rank).
  void finish();
  // A text every later save keeps in its manifest (ckpt::Manifest::notes) under `name`; each save
  // also keeps the train split's fingerprint (run/resume_data.h), which a resume compares.
  void keep_note(const std::string& name, std::string text) { notes_[name] = std::move(text); }

 private:
  // ConfigError if the saved config differs in math, or the data (run/resume_data.h); logs the other differences.
  void check_config(const ckpt::Manifest& manifest, const std::string& dir, bool log_allowed_changes) const;
  void apply_retention(int64_t protect) const;  // rank 0
  void choose_candidate();                      // collective
  // CheckpointError (the same on every rank) unless `dir` loads; ConfigError if its config differs.
  // Returns its step.
  int64_t check_candidate(const std::string& dir) const;
  std::string none_loads() const;  // the refusal, naming each checkpoint skipped and the ways on

  const Config& config_;
  dist::ProcessGroup& group_;
  Job job_;
  std::string root_;
  std::vector<std::string> candidates_;  // newest first; the first one loads (checked before any write)
  std::vector<std::pair<std::string, std::string>> skipped_;  // (folder, why it cannot be loaded)
  int64_t candidate_step_ = 0;                                // the first candidate's
  int64_t last_saved_step_ = -1;
  double last_saved_seconds_ = 0;
  std::unique_ptr<ckpt::AsyncSaver> async_;
  std::map<std::string, std::string> notes_;  // the data's note added at the first save
};

}  // namespace moco::run
