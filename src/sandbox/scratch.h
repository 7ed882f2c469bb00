// Scratch directories of sandboxed tasks: where they go, how much disk they
// use, and their removal on every path (a task's end, a worker killed
// mid-task, an agent restarted).
//
// An agent keeps them under a directory of its own (mkdtemp, named in its
// state directory) as slot-N/claw-task-<random>: a worker removes its slot's
// leftovers when it starts (the one before it may have been killed
// mid-task), and an agent removes the whole tree when it starts and stops.
// A task that made a directory it cannot enter, or files it cannot delete,
// does not keep them: removal makes each directory writable first. Removal
// runs only once every process of the task is gone (it changes modes by
// path).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace claw {

// Removes `path` and everything under it, without following symbolic links,
// making directories writable as it goes. False if something is left.
bool RemoveTree(const std::string& path);

// Removes everything inside `dir` (which stays). False if something is left.
bool EmptyDirectory(const std::string& dir);

// Bytes of disk that the files under `dir` occupy (allocated blocks, hard
// links counted once), stopping early once over `stop_above` (0: never).
// Never changes anything (a task may still be running in `dir`); a
// directory it cannot read sets `*unreadable`.
uint64_t DiskUsage(const std::string& dir, uint64_t stop_above = 0, bool* unreadable = nullptr);

// Bytes of files on the filesystem `dev` that the processes `pids` keep
// open or mapped after their last name was removed: disk that DiskUsage
// cannot see by names. Each file counted once, by its allocated blocks
// (open) or its mapped extent (mapped only). Linux (from /proc); 0 elsewhere.
// Reads at most `max_entries` descriptors and mapping lines in all: false
// if there were more (`*bytes` then counts those read).
bool HeldDeletedBytes(const std::vector<pid_t>& pids, dev_t dev, size_t max_entries,
                      uint64_t* bytes);

}  // namespace claw
