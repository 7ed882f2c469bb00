// The built-in apps.
#pragma once

#include "core/app.h"

namespace claw {

// A registry holding every built-in app (montecarlo, noop).
AppRegistry BuiltinApps();

}  // namespace claw
