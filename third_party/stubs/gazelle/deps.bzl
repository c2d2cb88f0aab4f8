"""go_repository under the name Gazelle writes into deps.bzl,
load("@gazelle//:deps.bzl", ...), which is Gazelle's name under bzlmod;
re-exported from Gazelle's WORKSPACE name, bazel_gazelle
(see ../README.md)."""

load("@bazel_gazelle//:deps.bzl", _go_repository = "go_repository")

go_repository = _go_repository
