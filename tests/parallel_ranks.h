#pragma once
// Runs a test's ranks as forked child processes (127.0.0.1 only, bounded in time): each child
// runs the given function and leaves with its return value as exit status, never returning into
// GoogleTest. A child still running at the deadline is killed and reported as -1.
//
// Fork only while this process has no other thread: a thread that allocates while the process
// forks can hand the child a locked allocator (GCC 12's ASan allocator has no fork handler; a
// child then hung at its first malloc). So the test's rendezvous store is made with start =
// false and started by `after_fork`, which runs after the last fork; and the children start
// working only once all are forked.
#include <signal.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "common/error.h"

namespace kimi::test {

inline std::vector<int> run_ranks(int n, const std::function<int(int rank)>& body,
                                  std::chrono::seconds limit = std::chrono::seconds(60),
                                  const std::function<void()>& after_fork = {}) {
  std::vector<pid_t> pids;
  int gate[2];  // the children wait for EOF on gate[0]: the parent closes gate[1] after the last fork
  if (pipe(gate) != 0) throw Error("run_ranks: pipe failed");
  for (int r = 0; r < n; ++r) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      close(gate[1]);
      char c;
      while (read(gate[0], &c, 1) < 0 && errno == EINTR) {
      }
      close(gate[0]);
      int rc = 100;
      try {
        rc = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        rc = 101;
      }
      std::fflush(nullptr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  close(gate[0]);
  if (after_fork) after_fork();
  close(gate[1]);  // every child is forked: let them run
  std::vector<int> codes(size_t(n), -2);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (codes[size_t(r)] != -2) continue;
      int status = 0;
      if (waitpid(pids[size_t(r)], &status, WNOHANG) == pids[size_t(r)]) {
        codes[size_t(r)] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (codes[size_t(r)] == -2) {
          kill(pids[size_t(r)], SIGKILL);
          waitpid(pids[size_t(r)], nullptr, 0);
          codes[size_t(r)] = -1;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return codes;
}

}  // namespace kimi::test
