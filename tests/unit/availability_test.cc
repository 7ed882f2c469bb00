#include "agent/availability.h"

#include <gtest/gtest.h>

namespace claw {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

SensorReadings Idle() {
  SensorReadings r;
  r.other_cpu = 0.05;
  r.user_idle = minutes(30);
  r.on_ac = true;
  return r;
}

TEST(AvailabilityPolicy, PausesWhenTheOwnerReturnsThenHandsBackAfterGrace) {
  AvailabilityOptions o;
  o.grace = seconds(30);
  AvailabilityPolicy p(o);
  FakeClock clock;
  EXPECT_EQ(p.Update(Idle(), clock.Now()), Availability::kAvailable);
  SensorReadings busy = Idle();
  busy.user_idle = seconds(3);
  EXPECT_EQ(p.Update(busy, clock.Now()), Availability::kPaused);
  EXPECT_NE(p.reason().find("user active"), std::string::npos);
  clock.Advance(seconds(29));
  EXPECT_EQ(p.Update(busy, clock.Now()), Availability::kPaused);
  clock.Advance(seconds(1));
  EXPECT_EQ(p.Update(busy, clock.Now()), Availability::kAway);
  clock.Advance(minutes(10));
  EXPECT_EQ(p.Update(Idle(), clock.Now()), Availability::kAvailable);
}

TEST(AvailabilityPolicy, ShortBusySpellOnlyPauses) {
  AvailabilityPolicy p(AvailabilityOptions{});
  FakeClock clock;
  SensorReadings busy = Idle();
  busy.other_cpu = 0.9;
  EXPECT_EQ(p.Update(busy, clock.Now()), Availability::kPaused);
  EXPECT_NE(p.reason().find("others use 90% CPU"), std::string::npos);
  clock.Advance(seconds(5));
  EXPECT_EQ(p.Update(Idle(), clock.Now()), Availability::kAvailable);
}

TEST(AvailabilityPolicy, BatteryThermalAndHeadless) {
  AvailabilityPolicy p(AvailabilityOptions{});
  FakeClock clock;
  SensorReadings r = Idle();
  r.on_ac = false;
  EXPECT_EQ(p.Update(r, clock.Now()), Availability::kPaused);
  EXPECT_EQ(p.reason(), "on battery");
  r = Idle();
  r.thermal_throttled = true;
  EXPECT_EQ(p.Update(r, clock.Now()), Availability::kPaused);
  r = Idle();
  r.user_idle.reset();  // no user session: a headless server is idle
  EXPECT_EQ(p.Update(r, clock.Now()), Availability::kAvailable);
}

TEST(AvailabilityPolicy, AlwaysIgnoresSensorsAndBatteryCanBeAllowed) {
  AvailabilityOptions o;
  o.always = true;
  AvailabilityPolicy p(o);
  SensorReadings r;
  r.other_cpu = 1.0;
  r.on_ac = false;
  r.user_idle = seconds(0);
  EXPECT_EQ(p.Update(r, Time{}), Availability::kAvailable);
  AvailabilityOptions b;
  b.require_ac = false;
  AvailabilityPolicy q(b);
  r = Idle();
  r.on_ac = false;
  EXPECT_EQ(q.Update(r, Time{}), Availability::kAvailable);
}

TEST(AvailabilityPolicy, TheOwnersPauseHoldsEvenOnADedicatedMachine) {
  AvailabilityOptions o;
  o.always = true;
  AvailabilityPolicy p(o);
  FakeClock clock;
  EXPECT_EQ(p.Update(Idle(), clock.Now()), Availability::kAvailable);
  p.SetControl(OwnerControl::kPaused);
  EXPECT_EQ(p.Update(Idle(), clock.Now()), Availability::kPaused);
  EXPECT_EQ(p.reason(), "paused by its owner");
  p.SetControl(OwnerControl::kFinishing);  // still available: the agent asks for nothing more
  EXPECT_EQ(p.Update(Idle(), clock.Now()), Availability::kAvailable);
  p.SetControl(OwnerControl::kNone);
  EXPECT_EQ(p.Update(Idle(), clock.Now()), Availability::kAvailable);
}

TEST(AvailabilityPolicy, WorksOnlyInItsHoursAndUnderItsMemoryCap) {
  AvailabilityOptions o;
  o.from_hour = 22;
  o.to_hour = 7;  // overnight
  o.max_memory_used = 0.8;
  AvailabilityPolicy p(o);
  FakeClock clock;
  SensorReadings r = Idle();
  for (int h : {22, 23, 0, 3, 6}) {
    r.local_hour = h;
    EXPECT_EQ(p.Update(r, clock.Now()), Availability::kAvailable) << h;
  }
  r.local_hour = 7;
  EXPECT_EQ(p.Update(r, clock.Now()), Availability::kPaused);
  EXPECT_EQ(p.reason(), "outside its hours (22:00 to 07:00; now 07:xx)");
  r.local_hour = 23;
  r.memory_used = 0.93;
  EXPECT_EQ(p.Update(r, clock.Now()), Availability::kPaused);
  EXPECT_EQ(p.reason(), "over the memory cap (93% in use, cap 80%)");
  r.memory_used = 0.5;
  EXPECT_EQ(p.Update(r, clock.Now()), Availability::kAvailable);
}

TEST(SystemSensors, ReadWithoutFailingOnThisMachine) {
  auto s = NewSystemSensors();
  SensorReadings a = s->Read({});
  SensorReadings b = s->Read({});
  EXPECT_GE(b.other_cpu, 0.0);
  EXPECT_LE(b.other_cpu, 1.0);
  (void)a;
}

}  // namespace
}  // namespace claw
