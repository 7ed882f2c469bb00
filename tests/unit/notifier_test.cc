// Notifications (coordinator/notifier.h): Standard Webhooks signatures
// against the spec's libraries' test vectors, Slack escaping, and targets
// that point inside the network refused.
#include "coordinator/notifier.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/log.h"
#include "store/store.h"

namespace claw {
namespace {

TEST(StandardWebhooks, SignsAsTheReferenceLibraries) {
  // standard-webhooks/standard-webhooks: the Python, Go and JavaScript tests.
  auto a = StandardWebhookSignature("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                                    "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
                                    R"({"test": 2432232314})");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
  // ... and the Rust tests.
  auto b = StandardWebhookSignature("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
                                    "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", 1649367553,
                                    R"({"email":"test@example.com","username":"test_user"})");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
  EXPECT_FALSE(StandardWebhookSignature("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "m", 1, "").ok());
  EXPECT_FALSE(StandardWebhookSignature("whsec_!!!", "m", 1, "").ok());
}

TEST(Slack, EscapesWhatItsFormattingReads) {
  EXPECT_EQ(SlackEscape("Job <j-1> & <@U123> > done"), "Job &lt;j-1&gt; &amp; &lt;@U123&gt; &gt; done");
}

TEST(NotifyTargets, InsideAddressesAreRefusedUnlessAllowed) {
  for (const char* url : {"http://127.0.0.1:7451/hook", "http://localhost/x", "http://LOCALHOST./x",
                          "http://api.localhost:7451/",
                          "http://169.254.169.254/latest/meta-data/", "https://10.0.0.5/h",
                          "http://192.168.1.1/", "http://[::1]:80/", "http://0.0.0.0/",
                          "http://[::ffff:127.0.0.1]/"}) {
    EXPECT_EQ(CheckTargetUrl(url, false).code(), StatusCode::kPermissionDenied) << url;
    EXPECT_TRUE(CheckTargetUrl(url, true).ok()) << url;
  }
  EXPECT_TRUE(CheckTargetUrl("https://93.184.216.34/hook", false).ok());
  for (const char* url : {"ftp://example.com/", "example.com/hook", "http://user:pw@example.com/",
                          "http://exa mple.com/", "http://:80/", "http://example.com:99999/"}) {
    EXPECT_EQ(CheckTargetUrl(url, true).code(), StatusCode::kInvalidArgument) << url;
  }
}

TEST(NotifyTargets, AreKeptPerUserAndSurviveARestart) {
  auto store = NewMemoryStore();
  FakeClock clock;
  {
    Notifier n(store.get(), &clock, NotifierOptions{}, NullLogger());
    auto t = n.Add("ann", "webhook", "https://93.184.216.34/hook");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->secret.rfind("whsec_", 0), 0u);
    EXPECT_EQ(n.Add("ann", "sms", "https://93.184.216.34/").status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(n.Add("ann", "email", "mailto:ann@example.org").status().code(),
              StatusCode::kFailedPrecondition)
        << "no SMTP server configured";
    EXPECT_EQ(n.Add("ann", "webhook", "http://127.0.0.1/").status().code(),
              StatusCode::kPermissionDenied);
    EXPECT_EQ(n.Remove(t->id, "bob").code(), StatusCode::kNotFound) << "not bob's";
  }
  Notifier again(store.get(), &clock, NotifierOptions{}, NullLogger());
  ASSERT_EQ(again.List("ann").size(), 1u);
  EXPECT_TRUE(again.List("bob").empty());
  EXPECT_TRUE(again.Remove(again.List("ann")[0].id, "ann").ok());
  EXPECT_TRUE(again.List("ann").empty());
}

}  // namespace
}  // namespace claw
