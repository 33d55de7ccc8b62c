// `cmestream alarms` and `cmestream watch`: the change alarms of a model (docs/algorithms.md §12,
// docs/user-guide.md "Change alarms").
#include <cstdio>
#include <iostream>
#include <string>

#include "client/cli/commands.h"
#include "client/cli/context.h"
#include "client/cli/json.h"
#include "client/cli/output.h"
#include "client/cpp/client.h"

namespace cmestream::cli {

const char kAlarmsUsage[] = R"(usage: cmestream alarms NAME [--since I] [--json]

The change alarms the model raised (models are created with alarms on; model create --alarms
off turns them off), oldest first, those with index >= I (default 0). Every pair is scored by
the model's one-step linear forecast before it is learned; a CUSUM on the scores raises an
alarm when their distribution changes (docs/algorithms.md section 12).
  index      the pair whose arrival raised the alarm: its 0-based position in the model's
             stream (for a trajectory without delays pair i is (row i, row i+1); with delays D
             and stride S it ends at row i + (D-1) S + 1)
  time       unix seconds its batch arrived (as logged: a restart replays the same)
  threshold  the CUSUM level crossed; score the statistic at the alarm
  channels   0-based raw channels, most changed first
  kind       "dynamics", "noise" (only the size of the forecast errors changed), or "spike"
             (one step beyond the tail of the steps so far)
  onset      the estimated index at which the change began
--json: {"model", "armed_at", "alarms": [{"index", "time", "score", "threshold", "channels",
         "kind", "onset"}], "dropped"} (armed_at -1: not armed yet; dropped: alarms older than
         every kept one, counted when I is at or before the first kept index; 1,000 are kept)
)";

const char kWatchUsage[] = R"(usage: cmestream watch NAME [--since I] [--seconds T]

Prints the model's alarms with index >= I (default 0), then each new one as it is raised, one
JSON object per line with the keys of `alarms --json` plus "model", until interrupted or T
seconds pass (default: no limit). To resume after a disconnect or a daemon restart, pass the
last index printed + 1: nothing is missed, nothing printed twice.
)";

namespace {

void WriteAlarm(JsonWriter& w, const v1::Alarm& a, bool with_model) {
  w.BeginObject();
  if (with_model) w.Key("model").String(a.model());
  w.Key("index").Uint(a.index());
  w.Key("time").Double(a.time());
  w.Key("score").Double(a.score());
  w.Key("threshold").Double(a.threshold());
  w.Key("channels").BeginArray();
  for (uint32_t c : a.channels()) w.Uint(c);
  w.EndArray();
  w.Key("kind").String(a.kind());
  w.Key("onset").Uint(a.onset());
  w.EndObject();
}

// What `alarms` and `watch` both take: NAME [--since I].
struct AlarmQuery {
  std::string model;
  uint64_t since = 0;  // the first alarm index to print
};

// Fills *q from the arguments of `cmd`; returns the usage error's exit code, or 0.
int ParseAlarmQuery(const Args& args, const std::string& cmd, const char* usage, AlarmQuery* q) {
  if (int rc = NeedName(args, cmd, usage)) return rc;
  q->model = args.positional[0];
  if (auto v = args.Value("since")) {
    absl::StatusOr<uint64_t> since = ParseUint("since", *v);
    if (!since.ok()) return FailUsage(cmd, since.status().message());
    q->since = *since;
  }
  return 0;
}

}  // namespace

int Alarms(Context& ctx, const Args& args) {
  const std::string cmd = "alarms";
  AlarmQuery q;
  if (int rc = ParseAlarmQuery(args, cmd, kAlarmsUsage, &q)) return rc;
  if (int rc = NeedClient(ctx, cmd)) return rc;
  auto r = ctx.client->ListAlarms(q.model, q.since);
  if (!r.ok()) return Fail(cmd, r.status());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    w.Key("model").String(q.model);
    w.Key("armed_at").Int(r->armed_at());
    w.Key("alarms").BeginArray();
    for (const v1::Alarm& a : r->alarms()) WriteAlarm(w, a, /*with_model=*/false);
    w.EndArray();
    w.Key("dropped").Uint(r->dropped());
    w.EndObject();
    PrintJson(w);
    return 0;
  }
  if (r->armed_at() < 0) {
    std::printf("# model '%s': the change detector is not armed yet\n", q.model.c_str());
  } else {
    std::printf("# model '%s': armed at pair %lld; %d alarm(s) with index >= %llu\n", q.model.c_str(),
                static_cast<long long>(r->armed_at()), r->alarms_size(), static_cast<unsigned long long>(q.since));
  }
  if (r->dropped() > 0) {
    std::printf("# %llu older alarm(s) are no longer kept\n", static_cast<unsigned long long>(r->dropped()));
  }
  if (r->alarms_size() > 0)
    std::printf("%10s %10s %-9s %-5s %8s  channels\n", "index", "onset", "kind", "dir", "score");
  for (const v1::Alarm& a : r->alarms()) {
    std::string channels;
    for (int i = 0; i < a.channels_size() && i < 8; ++i) channels += (i ? "," : "") + std::to_string(a.channels(i));
    if (a.channels_size() > 8) channels += ",...";
    std::printf("%10llu %10llu %-9s %-5s %8.2f  %s\n", static_cast<unsigned long long>(a.index()),
                static_cast<unsigned long long>(a.onset()), a.kind().c_str(), a.direction().c_str(), a.score(),
                channels.c_str());
  }
  return 0;
}

int Watch(Context& ctx, const Args& args) {
  const std::string cmd = "watch";
  AlarmQuery q;
  if (int rc = ParseAlarmQuery(args, cmd, kWatchUsage, &q)) return rc;
  double seconds = 0;
  if (auto v = args.Value("seconds")) {
    auto d = ParseDouble("seconds", *v);
    if (!d.ok() || !(*d > 0)) return FailUsage(cmd, "--seconds: expected a number of seconds > 0");
    seconds = *d;
  }
  if (int rc = NeedClient(ctx, cmd)) return rc;
  absl::Status s = ctx.client->WatchAlarms(q.model, q.since, seconds, [](const v1::Alarm& a) {
    JsonWriter w;
    WriteAlarm(w, a, /*with_model=*/true);
    PrintJson(w);
    std::cout.flush();
    return true;
  });
  if (!s.ok()) return Fail(cmd, s);
  return 0;
}

}  // namespace cmestream::cli
