#include "service/storage/manifest.h"

#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "service/storage/crc32c.h"
#include "service/storage/file_util.h"

namespace cmestream::service {

std::string EncodeManifest(const ManifestState& s) {
  std::string body = absl::StrCat("cmestream-manifest ", kManifestVersion, "\n");
  for (const auto& snap : s.snapshots) absl::StrAppend(&body, "snapshot ", snap.name, " covered=", snap.covered, "\n");
  absl::StrAppend(&body, "wal-segments ", s.wal_first_segment, " ", s.wal_last_segment, "\n");
  absl::StrAppend(&body, "wal-first-sequence ", s.wal_first_sequence, "\n");
  const uint32_t crc = crc32c::Mask(crc32c::Value(body.data(), body.size()));
  absl::StrAppend(&body, "crc ", absl::Hex(crc, absl::kZeroPad8), "\n");
  return body;
}

absl::StatusOr<ManifestState> ParseManifest(const std::string& text, const std::string& path) {
  const auto bad = [&](int line, const std::string& why) {
    return absl::DataLossError(absl::StrCat(path, ":", line, ": ", why, " (the manifest is damaged)"));
  };
  const size_t crc_at = text.rfind("crc ");
  if (crc_at == std::string::npos || (crc_at > 0 && text[crc_at - 1] != '\n')) return bad(0, "no checksum line");
  const std::string body = text.substr(0, crc_at);
  uint32_t stored = 0;
  const std::string crc_text(absl::StripTrailingAsciiWhitespace(text.substr(crc_at + 4)));
  if (!absl::SimpleHexAtoi(crc_text, &stored)) return bad(0, absl::StrCat("bad checksum '", crc_text, "'"));
  if (stored != crc32c::Mask(crc32c::Value(body.data(), body.size()))) return bad(0, "checksum mismatch");
  ManifestState s;
  int line_no = 0;
  bool saw_header = false;
  for (absl::string_view line : absl::StrSplit(body, '\n', absl::SkipEmpty())) {
    ++line_no;
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (line_no == 1) {
      uint32_t version = 0;
      if (f.size() != 2 || f[0] != "cmestream-manifest" || !absl::SimpleAtoi(f[1], &version)) {
        return bad(1, "not a cmestream manifest");
      }
      if (version > kManifestVersion) {
        return absl::FailedPreconditionError(absl::StrCat(path, ": manifest version ", version,
                                                          " was written by a newer cmestreamd (this one reads ",
                                                          kManifestVersion, "); run that version"));
      }
      saw_header = true;
      continue;
    }
    if (f.size() == 3 && f[0] == "snapshot" && f[2].rfind("covered=", 0) == 0) {
      ManifestState::Snapshot snap;
      snap.name = f[1];
      if (!absl::SimpleAtoi(f[2].substr(8), &snap.covered)) return bad(line_no, "bad covered sequence");
      s.snapshots.push_back(snap);
    } else if (f.size() == 3 && f[0] == "wal-segments") {
      if (!absl::SimpleAtoi(f[1], &s.wal_first_segment) || !absl::SimpleAtoi(f[2], &s.wal_last_segment)) {
        return bad(line_no, "bad segment range");
      }
    } else if (f.size() == 2 && f[0] == "wal-first-sequence") {
      if (!absl::SimpleAtoi(f[1], &s.wal_first_sequence)) return bad(line_no, "bad sequence");
    } else {
      return bad(line_no, absl::StrCat("unknown line '", std::string(line).substr(0, 80), "'"));
    }
  }
  if (!saw_header) return bad(1, "empty manifest");
  return s;
}

absl::StatusOr<ManifestState> Manifest::Load() {
  std::string text;
  if (absl::Status st = files::ReadFile(path_, &text); !st.ok()) return st;
  absl::StatusOr<ManifestState> s = ParseManifest(text, path_);
  if (s.ok()) {
    absl::MutexLock lock(&mu_);
    state_ = *s;
  }
  return s;
}

absl::Status Manifest::PersistLocked() { return files::WriteFileAtomically(path_, EncodeManifest(state_)); }

absl::Status Manifest::Write(const ManifestState& state) {
  absl::MutexLock lock(&mu_);
  state_ = state;
  return PersistLocked();
}

absl::Status Manifest::SetSnapshots(std::vector<ManifestState::Snapshot> snapshots) {
  absl::MutexLock lock(&mu_);
  state_.snapshots = std::move(snapshots);
  return PersistLocked();
}

absl::Status Manifest::SetWalSegments(uint64_t first, uint64_t last) {
  absl::MutexLock lock(&mu_);
  if (state_.wal_first_segment == first && state_.wal_last_segment == last) return absl::OkStatus();
  state_.wal_first_segment = first;
  state_.wal_last_segment = last;
  return PersistLocked();
}

absl::Status Manifest::SetWalFirstSequence(uint64_t first_sequence) {
  absl::MutexLock lock(&mu_);
  if (state_.wal_first_sequence == first_sequence) return absl::OkStatus();
  state_.wal_first_sequence = first_sequence;
  return PersistLocked();
}

ManifestState Manifest::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

}  // namespace cmestream::service
