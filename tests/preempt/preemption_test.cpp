// The stop signals as the ranks agree on them (preempt/preemption.h): one all-reduce sums every
// rank's code, and the sum still names the strongest signal any rank saw, for up to 999 ranks.
#include "preempt/preemption.h"

#include <gtest/gtest.h>

#include <csignal>
#include <string>

namespace {

using moco::preempt::signal_code;
using moco::preempt::signal_from_code;

// The sum over ranks of what each saw (0: none).
double summed(std::initializer_list<int> seen) {
  double sum = 0;
  for (const int sig : seen) sum += signal_code(sig);
  return sum;
}

TEST(PreemptionTest, EachSignalAloneReadsBack) {
  for (const int sig : {SIGUSR1, SIGHUP, SIGINT, SIGTERM}) EXPECT_EQ(signal_from_code(signal_code(sig)), sig) << sig;
  EXPECT_EQ(signal_from_code(0.0), 0);
  EXPECT_EQ(signal_code(SIGUSR2), 0.0);
}

TEST(PreemptionTest, TheStrongestSignalOfAnyRankWins) {
  EXPECT_EQ(signal_from_code(summed({SIGUSR1, SIGHUP, SIGUSR1, 0})), SIGHUP);
  EXPECT_EQ(signal_from_code(summed({SIGHUP, SIGINT})), SIGINT);
  EXPECT_EQ(signal_from_code(summed({SIGINT, SIGTERM, SIGUSR1})), SIGTERM);
}

TEST(PreemptionTest, NineHundredNinetyNineRanksDoNotCarryIntoTheNextSignal) {
  for (const int sig : {SIGUSR1, SIGHUP, SIGINT}) {
    double sum = 0;
    for (int rank = 0; rank < 999; ++rank) sum += signal_code(sig);
    EXPECT_EQ(signal_from_code(sum), sig) << sig;
  }
}

TEST(PreemptionTest, NamesForTheLog) {
  EXPECT_EQ(std::string(moco::preempt::signal_name(SIGINT)), "SIGINT");
  EXPECT_EQ(std::string(moco::preempt::signal_name(SIGHUP)), "SIGHUP");
  EXPECT_EQ(std::string(moco::preempt::signal_name(SIGTERM)), "SIGTERM");
  EXPECT_EQ(std::string(moco::preempt::signal_name(SIGUSR1)), "SIGUSR1");
}

}  // namespace
