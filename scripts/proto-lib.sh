# Shared by scripts/gen-proto and scripts/check-proto; sourced, not run.
# Both are run from the repository root.
#
# The protobuf API lives in api/: the .proto files under api/proto, buf's
# configuration in api/buf.yaml and api/buf.gen.yaml, the generated Go code
# next to the hand-written Go code of each package (api/curator/v1).
#
# Every tool is a Go program run at a pinned version with "go run
# MODULE@VERSION", which builds it once and then takes it from the Go build
# cache. None of them is a tool line in go.mod (buf's dependencies would
# swamp it), and no protoc is involved: buf compiles the .proto files itself
# and runs the two code generators as local plugins.
#   - buf, pinned here;
#   - protoc-gen-go at the version of google.golang.org/protobuf that go.mod
#     selects, so the generated code always matches the runtime it is built
#     against;
#   - protoc-gen-go-grpc, pinned here (its output needs grpc-go >= 1.64).

proto_dir=api
buf_version=v1.75.0
protoc_gen_go_grpc_version=v1.6.2

# proto_tools_path TMP creates TMP/bin holding protoc-gen-go and
# protoc-gen-go-grpc wrappers, to put in front of PATH while buf runs, and
# prints its path.
proto_tools_path() {
	local bin="$1/bin"
	mkdir -p "$bin"
	proto_wrapper "$bin/protoc-gen-go" "google.golang.org/protobuf/cmd/protoc-gen-go@$(protobuf_version)"
	proto_wrapper "$bin/protoc-gen-go-grpc" "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$protoc_gen_go_grpc_version"
	printf '%s\n' "$bin"
}

# protobuf_version prints the version of google.golang.org/protobuf that
# go.mod selects.
protobuf_version() {
	go list -m -f '{{.Version}}' google.golang.org/protobuf
}

# proto_wrapper FILE PACKAGE@VERSION writes an executable FILE that runs
# the Go program PACKAGE@VERSION with its arguments, standard input and
# output (the plugin protocol) passed through.
proto_wrapper() {
	printf '#!/bin/sh\nexec go run %s "$@"\n' "$2" >"$1"
	chmod +x "$1"
}

# buf runs buf at the pinned version. Give it $proto_dir as its input: it
# then reports paths relative to the repository root.
buf() {
	go run "github.com/bufbuild/buf/cmd/buf@$buf_version" "$@"
}

# proto_build_tools runs every tool once up front, so that a cold build
# (minutes for buf) is announced instead of looking like a hang, and a
# failing download shows as such.
proto_build_tools() {
	local pv
	pv=$(protobuf_version)
	echo "building buf $buf_version, protoc-gen-go $pv, protoc-gen-go-grpc $protoc_gen_go_grpc_version (minutes the first time, cached afterwards)" >&2
	buf --version >/dev/null
	go run "google.golang.org/protobuf/cmd/protoc-gen-go@$pv" --version >/dev/null
	go run "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$protoc_gen_go_grpc_version" --version >/dev/null
}

# proto_generate TMP generates the Go code of every .proto file into
# TMP/generated, laid out as in $proto_dir (TMP/generated/curator/v1/...).
# TMP must be an absolute path to an existing directory.
proto_generate() {
	local bin
	bin=$(proto_tools_path "$1")
	PATH="$bin:$PATH" buf generate "$proto_dir" --template "$proto_dir/buf.gen.yaml" --output "$1/generated"
}

# proto_generated_files DIR prints, sorted and relative to DIR, the
# generated Go files under DIR.
proto_generated_files() {
	(cd "$1" && find . -name '*.pb.go' | LC_ALL=C sort)
}

# proto_copy_generated FROM TO copies the generated Go files under
# directory FROM to the same relative paths under directory TO.
proto_copy_generated() {
	local f
	proto_generated_files "$1" | while read -r f; do
		mkdir -p "$2/$(dirname "$f")"
		cp "$1/$f" "$2/$f"
	done
}
