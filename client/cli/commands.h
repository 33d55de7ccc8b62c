// The commands of the `cmestream` tool; main.cc dispatches to them after parsing the global
// flags and the command's own flags. Each returns the process exit status (0 ok, kExitServer,
// kExitUsage) and prints its result on stdout, errors on stderr.
#ifndef CMESTREAM_CLIENT_CLI_COMMANDS_H_
#define CMESTREAM_CLIENT_CLI_COMMANDS_H_

#include "client/cli/context.h"

namespace cmestream::cli {

// commands_models.cc
int ModelCreate(Context& ctx, const Args& args);
int ModelDescribe(Context& ctx, const Args& args);
int ModelList(Context& ctx, const Args& args);
int ModelDelete(Context& ctx, const Args& args);
int Snapshot(Context& ctx, const Args& args);
int Export(Context& ctx, const Args& args);
int Import(Context& ctx, const Args& args);
int Health(Context& ctx, const Args& args);

// commands_ingest.cc
int Ingest(Context& ctx, const Args& args);
int Producer(Context& ctx, const Args& args);

// commands_views.cc
int Refresh(Context& ctx, const Args& args);
int Koopman(Context& ctx, const Args& args);
int Predict(Context& ctx, const Args& args);
int Dictionary(Context& ctx, const Args& args);
int Counts(Context& ctx, const Args& args);
int Embedding(Context& ctx, const Args& args);
int Clusters(Context& ctx, const Args& args);
int Aggregation(Context& ctx, const Args& args);
int Latent(Context& ctx, const Args& args);
int Forecast(Context& ctx, const Args& args);

// commands_lags.cc: lag scans and CK tests (docs/user-guide.md "Lag times and the CK test")
extern const char kTimescalesUsage[];
extern const char kCkTestUsage[];
int Timescales(Context& ctx, const Args& args);
int CkTest(Context& ctx, const Args& args);

// commands_alarms.cc: change alarms (docs/user-guide.md "Change alarms")
extern const char kAlarmsUsage[];
extern const char kWatchUsage[];
int Alarms(Context& ctx, const Args& args);
int Watch(Context& ctx, const Args& args);

// commands_simulate.cc
int Simulate(const Args& args);

}  // namespace cmestream::cli

#endif  // CMESTREAM_CLIENT_CLI_COMMANDS_H_
