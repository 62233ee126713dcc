// The end of a child's stderr, kept for its failure's report
// (launch/stderr_tail.h).
#include "launch/stderr_tail.h"

#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace ductile::launch {
namespace {

void WriteAll(int fd, const std::string& text) {
  ASSERT_EQ(write(fd, text.data(), text.size()),
            static_cast<ssize_t>(text.size()));
}

TEST(StderrTail, KeepsTheLastWholeLinesThatFit) {
  Result<std::unique_ptr<StderrTail>> tail = StderrTail::Open(/*copy_fd=*/-1);
  ASSERT_TRUE(tail.ok()) << tail.status();
  std::string all;
  for (int i = 0; i < 500; ++i) all += "line " + std::to_string(i) + "\n";
  WriteAll((*tail)->write_fd(), all);
  (*tail)->CloseWriteEnd();
  const std::string end = (*tail)->Tail(10000);
  EXPECT_LE(end.size(), StderrTail::kMaxTailBytes);
  EXPECT_GT(end.size(), StderrTail::kMaxTailBytes / 2);
  // A suffix of what was written, starting at a line.
  ASSERT_LE(end.size(), all.size());
  EXPECT_EQ(all.substr(all.size() - end.size()), end);
  EXPECT_EQ(end.rfind("line ", 0), 0u) << end;
  EXPECT_EQ(end.substr(end.size() - 9), "line 499\n");
}

TEST(StderrTail, AShortErrorIsKeptWhole) {
  Result<std::unique_ptr<StderrTail>> tail = StderrTail::Open(-1);
  ASSERT_TRUE(tail.ok()) << tail.status();
  WriteAll((*tail)->write_fd(), "Traceback ...\nValueError: bad\n");
  (*tail)->CloseWriteEnd();
  EXPECT_EQ((*tail)->Tail(10000), "Traceback ...\nValueError: bad\n");
}

TEST(StderrTail, CopiesWhatItReadsToItsCopyDescriptor) {
  int copy[2];
  ASSERT_EQ(pipe(copy), 0);
  {
    Result<std::unique_ptr<StderrTail>> tail = StderrTail::Open(copy[1]);
    ASSERT_TRUE(tail.ok()) << tail.status();
    WriteAll((*tail)->write_fd(), "passed on\n");
    (*tail)->CloseWriteEnd();
    EXPECT_EQ((*tail)->Tail(10000), "passed on\n");
  }
  close(copy[1]);
  char buffer[64];
  const ssize_t n = read(copy[0], buffer, sizeof(buffer));
  close(copy[0]);
  EXPECT_EQ(std::string(buffer, n > 0 ? n : 0), "passed on\n");
}

}  // namespace
}  // namespace ductile::launch
