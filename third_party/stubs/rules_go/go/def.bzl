"""The rules Polis' BUILD.bazel files load from @rules_go//go:def.bzl,
re-exported from rules_go under its WORKSPACE name, io_bazel_rules_go
(see ../../README.md)."""

load(
    "@io_bazel_rules_go//go:def.bzl",
    _go_binary = "go_binary",
    _go_library = "go_library",
    _go_test = "go_test",
)

go_binary = _go_binary
go_library = _go_library
go_test = _go_test
