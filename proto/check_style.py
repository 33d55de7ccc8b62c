#!/usr/bin/python3
"""Style check of the public .proto files without buf (not packaged in Debian): the rules of
proto/buf.yaml that matter to generated code in other languages.
  - field names lower_snake_case (FIELD_LOWER_SNAKE_CASE), messages/services/RPCs PascalCase,
    enum values UPPER_SNAKE_CASE
  - package versioned (PACKAGE_VERSION_SUFFIX) and matching the directory (PACKAGE_DIRECTORY_MATCH)
  - go_package, java_package, csharp_namespace options present (protoc-gen-go refuses a file
    without go_package)
usage: check_style.py [PROTO_ROOT]; exits 1 listing every finding as file:line: message.
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
FIELD = re.compile(r"^\s*(?:optional\s+|repeated\s+)?(?:map<[^>]+>|[A-Za-z_][\w.]*)\s+(\w+)\s*=\s*\d+")
findings = []
files = 0
for dirpath, _, names in os.walk(ROOT):
    for name in sorted(names):
        if not name.endswith(".proto"):
            continue
        files += 1
        path = os.path.join(dirpath, name)
        rel = os.path.relpath(path, ROOT)
        text = open(path).read()
        code = re.sub(r"//[^\n]*", "", text)
        pkg = re.search(r"^package\s+([\w.]+);", code, re.M)
        if not pkg:
            findings.append(f"{rel}: no package")
        else:
            if not re.search(r"\.v\d+(alpha\d*|beta\d*)?$", pkg.group(1)):
                findings.append(f"{rel}: package {pkg.group(1)} has no version suffix")
            if pkg.group(1).replace(".", "/") != os.path.dirname(rel):
                findings.append(f"{rel}: package {pkg.group(1)} does not match directory {os.path.dirname(rel)}")
        for option in ("go_package", "java_package", "csharp_namespace"):
            if not re.search(rf"^option\s+{option}\s*=", code, re.M):
                findings.append(f"{rel}: option {option} missing")
        for i, line in enumerate(code.splitlines(), 1):
            for kind, pattern, ok in (("message", r"\bmessage\s+(\w+)", r"^[A-Z][A-Za-z0-9]*$"),
                                      ("service", r"\bservice\s+(\w+)", r"^[A-Z][A-Za-z0-9]*$"),
                                      ("rpc", r"\brpc\s+(\w+)", r"^[A-Z][A-Za-z0-9]*$"),
                                      ("enum", r"\benum\s+(\w+)", r"^[A-Z][A-Za-z0-9]*$")):
                for m in re.finditer(pattern, line):
                    if not re.match(ok, m.group(1)):
                        findings.append(f"{rel}:{i}: {kind} {m.group(1)} is not PascalCase")
            if re.match(r"^\s*(message|service|rpc|enum|option|package|syntax|import|reserved|oneof)\b", line):
                continue
            for stmt in line.split(";"):
                m = FIELD.match(stmt + ";")
                if m and not re.match(r"^[a-z][a-z0-9_]*$", m.group(1)):
                    findings.append(f"{rel}:{i}: field {m.group(1)} is not lower_snake_case")
            m = re.match(r"^\s*([A-Za-z_]\w*)\s*=\s*\d+\s*;", line)
            if m and not FIELD.match(line) and not re.match(r"^[A-Z][A-Z0-9_]*$", m.group(1)):
                findings.append(f"{rel}:{i}: enum value {m.group(1)} is not UPPER_SNAKE_CASE")
for f in findings:
    print(f)
print(f"proto style: {files} files, {len(findings)} findings")
sys.exit(1 if findings or files == 0 else 0)
