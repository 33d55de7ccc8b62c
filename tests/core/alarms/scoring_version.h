// An alarm monitor's options as the release that wrote ALRM `version` (2..10) scored: the tests
// each later version added turned off (scoring_v3 from v3, scoring_v4 v4, holdover v5,
// drift_holdover v6, step_test v7, return_test v8, slow_cusums v9, late_confirm v10). Shared by the tests and
// benchmarks that replay every version (core/alarms/alarm_monitor.h says what each version scores).
#pragma once

#include "core/alarms/alarm_monitor.h"

namespace cmestream::test_support {

inline void ScoreAsVersion(AlarmMonitor::Options& o, int version) {
  o.scoring_v3 = version >= 3;
  o.scoring_v4 = version >= 4;
  o.holdover = version >= 5;
  o.drift_holdover = version >= 6;
  o.step_test = version >= 7;
  o.return_test = version >= 8;
  o.slow_cusums = version >= 9;
  o.late_confirm = version >= 10;
  o.spike_test = version >= 11;
}

}  // namespace cmestream::test_support
