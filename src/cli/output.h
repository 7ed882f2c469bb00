// How the CLI shows progress and results.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "claw.pb.h"
#include "cli/client.h"

namespace claw {

// Text from a task, an agent or a job's submitter, shown to people (never
// in --json output): control characters and invalid UTF-8 escaped
// (common/text.h), so it cannot drive the terminal.
// OneLine: for a table cell or a one-line message; line breaks and tabs
// become spaces; when `max` is not 0, cut to `max` bytes ending in "...".
std::string OneLine(std::string_view text, size_t max = 0);
// TerminalBlock: for several lines; each kept newline is followed by `indent`.
std::string TerminalBlock(std::string_view text, std::string_view indent = "");

// Draws "[#####.....]  45%  450/1000 tasks" on stderr (only on a terminal,
// else one line per 10%).
void DrawProgress(const v1::JobInfo& info);
// The index of the best trial of a train or sweep result ({"best": {"trial":
// N, ...}}, or a bare N as results from before 2026-11-23 have it); none
// when the result names none.
std::optional<size_t> BestTrial(const nlohmann::json& result);
// Prints the job's result: the Monte Carlo estimate with its interval and
// the closed-form reference when there is one, else the JSON.
// Trials of train and sweep jobs print as a ranked table, or CSV with `csv`.
// A result whose shape the printer does not expect is printed as JSON with
// a note, never an abort.
void PrintResult(const v1::JobInfo& job, const std::string& result_json, bool json,
                 bool csv = false);
// Downloads the output files that a finished job's result lists (exec:
// tasks[].files; train: trials[].files) into `dir`, each checked against its hash: DIR/PATH, or
// DIR/task-N/PATH when tasks made files of the same name. Paths that would
// land outside `dir` are refused. Prints one line per file; returns how many.
// `best_only`: only the files of the best trial (result["best"]["trial"]).
Result<size_t> DownloadOutputs(const Client& client, const std::string& result_json,
                               const std::string& dir, bool best_only = false);
// Watches the job with a progress bar, then prints its result. Exit code.
int WaitAndPrint(Client& client, const std::string& job_id, bool json);

// For a training job with differential privacy: on stderr, what one round
// spends and how many rounds fit the budget (nothing for other jobs).
void PrintPrivacyPlan(const std::string& spec_json);

}  // namespace claw
