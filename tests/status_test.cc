// Status and Result: the public error contract (include/ductile/status.h).
#include "ductile/status.h"

#include <string>

#include "gtest/gtest.h"

namespace ductile {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError(std::to_string(x) + " is odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  DUCTILE_ASSIGN_OR_RETURN(int half, Half(x));
  DUCTILE_ASSIGN_OR_RETURN(const int quarter, Half(half));
  return quarter;
}

Status CheckQuarter(int x, int* out) {
  DUCTILE_ASSIGN_OR_RETURN(*out, Quarter(x));
  DUCTILE_RETURN_IF_ERROR(Half(*out).status());
  return Status::Ok();
}

TEST(Status, AssignOrReturnPassesTheValueOrTheFirstError) {
  auto q = Quarter(12);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, 3);
  auto odd = Quarter(6);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(odd.status().message(), "3 is odd");
  int out = 0;
  EXPECT_TRUE(CheckQuarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(CheckQuarter(12, &out).message(), "3 is odd");
}

TEST(Status, ToStringNamesTheCode) {
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  EXPECT_EQ(UnavailableError("server 2 is gone").ToString(),
            "Unavailable: server 2 is gone");
  EXPECT_EQ(StatusCodeName(StatusCode::kResourceExhausted),
            "ResourceExhausted");
}

TEST(Status, AResultBuiltFromOkIsAnInternalError) {
  Result<int> r = Status::Ok();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(StatusDeathTest, ReadingTheValueOfAFailedResultAbortsWithItsStatus) {
  Result<std::string> r = NotFoundError("no table named 'w'");
  EXPECT_DEATH((void)r.value(), "NotFound: no table named 'w'");
  EXPECT_DEATH((void)*r, "NotFound: no table named 'w'");
  EXPECT_DEATH((void)r->size(), "NotFound: no table named 'w'");
}

}  // namespace
}  // namespace ductile
