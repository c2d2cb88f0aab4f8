#!/bin/sh
echo "coverage tools are not available in Polis' offline Bazel build; use go test -cover" >&2
exit 1
