# Shared by scripts/update-bazel and scripts/check-bazel; sourced, not run.
# Both are run from the repository root.
#
# Gazelle runs as the Go tool pinned in go.mod (go tool gazelle). It learns
# the external modules from go.mod alone: each required module is passed as a
# -known_import, and -external=static makes Gazelle resolve imports only
# against those, never by asking the network. An import that no module in
# go.mod provides is left out of the BUILD file, and the Go build itself
# fails on it first.

# require_modules prints "PATH INDIRECT" (INDIRECT is 1 or 0) for every
# require line of go.mod.
require_modules() {
	go mod edit -json | awk '
		/^\t"Require": \[/ { inreq = 1; next }
		inreq && /^\t\]/ { inreq = 0 }
		!inreq { next }
		/^\t\t\{/ { path = ""; indirect = 0 }
		/"Path":/ { path = $2; gsub(/[",]/, "", path) }
		/"Indirect": true/ { indirect = 1 }
		/^\t\t\}/ { print path, indirect }
	'
}

# tool_packages prints the package path of every tool line of go.mod.
tool_packages() {
	go mod edit -json | awk '
		/^\t"Tool": \[/ { intool = 1; next }
		intool && /^\t\]/ { intool = 0 }
		intool && /"Path":/ { p = $2; gsub(/[",]/, "", p); print p }
	'
}

# run_gazelle MODE runs Gazelle over the whole repository; MODE is fix
# (rewrite the files) or diff (print a unified diff, change nothing, and exit
# 1 if there is one). -strict turns a malformed BUILD file or an unknown
# directive into an error.
run_gazelle() {
	local mode=$1
	local -a known=()
	local path indirect
	while read -r path indirect; do
		known+=("-known_import=$path")
	done < <(require_modules)
	go tool gazelle update -repo_root="$PWD" -mode="$mode" -strict -external=static "${known[@]}"
}

# go_deps_repos prints, sorted, the go_deps repositories that the root module
# must import with use_repo:
#   - every one that a BUILD.bazel file of Polis refers to (else Bazel
#     cannot see it; third_party/ holds other repositories, see WORKSPACE);
#   - every module go_deps itself counts as a direct dependency: the require
#     lines without "// indirect", and the modules that provide a tool line.
#     Listing them keeps "bazel mod tidy" and this script in agreement.
# Modules that a bazel_dep provides (gazelle, rules_go) are not go_deps
# repositories and are left out. A reference to a repository that is neither
# a go.mod module nor a bazel_dep is an error.
go_deps_inputs() {
	require_modules | sed 's/^/require /'
	tool_packages | sed 's/^/tool /'
	{
		find . -name BUILD.bazel -not -path './.git/*' -not -path './third_party/*' -not -path '*/testdata/*' -print0 |
			xargs -0 -r grep -hoE '"@[A-Za-z0-9_.~+-]+//' || true
	} | sed 's/^"@//; s|//$||; s/^/label /'
	# Repositories MODULE.bazel declares itself with a repository rule
	# (the kernel package, http_file), which are not Go modules either.
	awk '/^http_file\(/ { inrule = 1 } inrule && match($0, /name = "[^"]+"/) { print "own " substr($0, RSTART + 8, RLENGTH - 9); inrule = 0 }' MODULE.bazel
}

go_deps_repos() {
	local names
	if ! names=$(go_deps_inputs | awk '
		# The repository name Gazelle and go_deps give a Go module: the host
		# name reversed, then the path, with every run of other characters
		# turned into "_" (github.com/foo/bar-baz -> com_github_foo_bar_baz).
		function repo_name(p,    n, parts, m, host, out, i) {
			p = tolower(p)
			n = split(p, parts, "/")
			m = split(parts[1], host, ".")
			out = host[m]
			for (i = m - 1; i >= 1; i--) out = out "." host[i]
			for (i = 2; i <= n; i++) out = out "." parts[i]
			gsub(/[^a-z0-9_]+/, "_", out)
			return out
		}
		BEGIN {
			# Go modules provided by bazel_dep modules in MODULE.bazel.
			from_bazel_dep["github.com/bazelbuild/bazel-gazelle"] = 1
			from_bazel_dep["github.com/bazelbuild/rules_go"] = 1
			# Apparent names of the bazel_dep modules themselves.
			bazel_dep["rules_go"] = 1
			bazel_dep["gazelle"] = 1
		}
		$1 == "require" {
			if ($2 in from_bazel_dep) next
			name = repo_name($2)
			module_of_repo[name] = $2
			modules[++nmod] = $2
			if ($3 == "0") want[name] = 1
			next
		}
		$1 == "tool" { tools[++ntool] = $2; next }
		$1 == "own" { bazel_dep[$2] = 1; next }
		$1 == "label" { labels[$2] = 1; next }
		END {
			# A tool line names a package; its module is the longest
			# required module path that is a prefix of it.
			for (t = 1; t <= ntool; t++) {
				best = ""
				for (i = 1; i <= nmod; i++) {
					m = modules[i]
					if ((tools[t] == m || index(tools[t], m "/") == 1) && length(m) > length(best))
						best = m
				}
				if (best != "") want[repo_name(best)] = 1
			}
			bad = 0
			for (l in labels) {
				if (l in bazel_dep) continue
				if (l in module_of_repo) { want[l] = 1; continue }
				printf "BUILD.bazel files refer to @%s, which is neither a module in go.mod nor a bazel_dep in MODULE.bazel\n", l > "/dev/stderr"
				bad = 1
			}
			for (w in want) print w
			exit bad
		}
	'); then
		return 1
	fi
	printf '%s\n' "$names" | LC_ALL=C sort
}

# render_module_file prints MODULE.bazel with its use_repo(go_deps, ...) call
# replaced by one listing exactly the repositories from go_deps_repos.
render_module_file() {
	local repos
	repos=$(go_deps_repos) || return 1
	REPOS="$repos" awk '
		function emit(    n, names, i) {
			print "use_repo("
			print "    go_deps,"
			n = split(ENVIRON["REPOS"], names, "\n")
			for (i = 1; i <= n; i++)
				if (names[i] != "") print "    \"" names[i] "\","
			print ")"
			done = 1
		}
		skipping { if ($0 == ")") skipping = 0; next }
		held != "" {
			if ($0 ~ /^[ \t]*go_deps,[ \t]*$/) { held = ""; skipping = 1; emit(); next }
			print held; held = ""
		}
		$0 == "use_repo(" { held = $0; next }
		/^use_repo\(go_deps[,)]/ { emit(); next }
		{ print }
		END {
			if (held != "") print held
			if (!done) {
				print "MODULE.bazel has no use_repo(go_deps, ...) call to update" > "/dev/stderr"
				exit 1
			}
		}
	' MODULE.bazel
}

# Go modules whose build files go_repository must replace rather than keep
# (build_file_generation = "clean", a mode Polis' Gazelle patch adds):
# grpc-gateway/v2 ships BUILD files that load @rules_proto, which the
# WORKSPACE build cannot download.
clean_build_file_repos=(com_github_grpc_ecosystem_grpc_gateway_v2)

# render_deps_file prints deps.bzl as it should be: a go_repository rule,
# with version and checksum, for every module in go.mod and go.sum, for the
# WORKSPACE build (see WORKSPACE). Gazelle's update-repos writes it; it runs
# on a copy, so nothing in the checkout changes. It keeps attributes added
# by hand, and -prune drops modules go.mod no longer has.
render_deps_file() {
	local tmp status=0
	tmp=$(mktemp -d)
	cp WORKSPACE go.mod go.sum MODULE.bazel "$tmp/"
	if [ -f deps.bzl ]; then
		cp deps.bzl "$tmp/"
	else
		printf 'def go_dependencies():\n    pass\n' >"$tmp/deps.bzl"
	fi
	if go tool gazelle update-repos -repo_root="$tmp" -from_file="$tmp/go.mod" \
		-to_macro=deps.bzl%go_dependencies -build_file_proto_mode=disable_global -prune; then
		CLEAN=" ${clean_build_file_repos[*]} " awk '
			# After the name line of a repository listed in CLEAN, add
			# build_file_generation = "clean" unless it is already there.
			pending != "" {
				if ($0 !~ /build_file_generation/) print "        build_file_generation = \"clean\","
				pending = ""
			}
			{ print }
			match($0, /^        name = "[^"]+",$/) {
				n = $0; sub(/^        name = "/, "", n); sub(/",$/, "", n)
				if (index(ENVIRON["CLEAN"], " " n " ")) pending = n
			}
		' "$tmp/deps.bzl" || status=1
	else
		status=1
	fi
	rm -rf "$tmp"
	return "$status"
}
