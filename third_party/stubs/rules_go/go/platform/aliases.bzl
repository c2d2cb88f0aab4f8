"""Declares an alias for every config_setting that rules_go declares in
@io_bazel_rules_go//go/platform (one per GOOS, per GOARCH and per valid
GOOS_GOARCH pair), so that select() keys written as @rules_go//go/platform:X
mean the same condition in the WORKSPACE build."""

load("@io_bazel_rules_go//go/platform:list.bzl", "GOARCH", "GOOS", "GOOS_GOARCH")

def platform_aliases():
    names = list(GOOS) + list(GOARCH) + [goos + "_" + goarch for goos, goarch in GOOS_GOARCH]
    for name in names:
        native.alias(
            name = name,
            actual = "@io_bazel_rules_go//go/platform:" + name,
            visibility = ["//visibility:public"],
        )
