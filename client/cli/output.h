// Printing helpers shared by the `cmestream` commands: numbers, model descriptions (table and
// JSON), view metadata.
#ifndef CMESTREAM_CLIENT_CLI_OUTPUT_H_
#define CMESTREAM_CLIENT_CLI_OUTPUT_H_

#include <initializer_list>
#include <string>

#include "client/cli/context.h"
#include "client/cli/json.h"
#include "google/protobuf/message.h"

namespace cmestream::cli {

// Formats v with "%.6g".
std::string Num(double v);
// Writes the fields `names` of `message`, in that order, each under its field name, with the
// JsonWriter call of its type (signed and unsigned integers, doubles, bools, strings); a repeated
// field as a list. A field with presence (proto3 `optional`) is written only when set, as the
// `has_x()` tests it stands for did; every other field always. Most replies mirror their proto
// messages field for field, so one list of names says what Key(...).Type(...) lines said one by
// one. requires: every name is a field of one of those types (a misspelt one aborts).
void WriteFieldsJson(JsonWriter& w, const google::protobuf::Message& message, std::initializer_list<const char*> names);
// Writes the "view_version" and "samples" keys.
void WriteViewJson(JsonWriter& w, const v1::ViewInfo& view);
void WriteConfigJson(JsonWriter& w, const v1::ModelConfig& c);
void WriteModelJson(JsonWriter& w, const v1::ModelInfo& m);
// The "spectrum" object of a Koopman reply or a model description; infinite and
// unavailable (NaN) timescales are null.
void WriteSpectrumJson(JsonWriter& w, const v1::SpectrumInfo& s);
// Readable spectrum summary (estimator, epoch, score, cross-view timescales, warnings) on
// stdout, each line indented by `indent`.
void PrintSpectrum(const v1::SpectrumInfo& s, const std::string& indent);
// The "summary" key of a sub-view reply: termination, message, brief_report and the named
// figures (keys sorted, so output is stable).
void WriteFitSummaryJson(JsonWriter& w, const v1::FitSummary& s);
// "# fit: <brief report>", plus a "# warning:" line when the fit did not end in success.
void PrintFitSummary(const v1::FitSummary& s);
// Readable description of a model on stdout.
void PrintModel(const v1::ModelInfo& m);
// Writes w's text and a newline on stdout.
void PrintJson(const JsonWriter& w);
// Opens the JSON reply of a query of a model's view: {"model", then the WriteViewJson keys.
void BeginViewReply(JsonWriter& w, const std::string& model, const v1::ViewInfo& view);
// Closes the reply BeginViewReply opened and prints it (PrintJson).
void PrintReply(JsonWriter& w);

}  // namespace cmestream::cli

#endif  // CMESTREAM_CLIENT_CLI_OUTPUT_H_
