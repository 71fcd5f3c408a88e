# The pinned Go tools of gen.sh and test.sh, in one place. Sourced, not run.
#
# Each tool is built from the Go module proxy by `go install PKG@VERSION` into its
# own directory of a cache, named after the version, so a cached binary is always
# the pinned one and a version bump here installs the new one on the next run:
#   ${CTXWARDEN_GO_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxwarden/go-tools}/NAME@VERSION/NAME
# Nothing there is committed. The Go build and module caches are the usual ones.

# protoc-gen-go lives in google.golang.org/protobuf: keep it at go.mod's version.
PROTOC_GEN_GO_PKG="google.golang.org/protobuf/cmd/protoc-gen-go"
PROTOC_GEN_GO_VERSION="v1.36.12"
PROTOC_GEN_GO_GRPC_PKG="google.golang.org/grpc/cmd/protoc-gen-go-grpc"
PROTOC_GEN_GO_GRPC_VERSION="v1.6.2"
GOVULNCHECK_PKG="golang.org/x/vuln/cmd/govulncheck"
GOVULNCHECK_VERSION="v1.9.0"

go_tools_dir() {
  if [[ -n "${CTXWARDEN_GO_TOOLS:-}" ]]; then
    printf '%s\n' "$CTXWARDEN_GO_TOOLS"
  elif [[ -n "${XDG_CACHE_HOME:-}" ]]; then
    printf '%s\n' "$XDG_CACHE_HOME/ctxwarden/go-tools"
  elif [[ -n "${HOME:-}" ]]; then
    printf '%s\n' "$HOME/.cache/ctxwarden/go-tools"
  else
    printf '%s\n' "${TMPDIR:-/tmp}/ctxwarden-go-tools-$(id -u)"
  fi
}

# go_tool PKG VERSION: prints the path of the binary of PKG@VERSION, installing it
# first when the cache has none. Its progress goes to stderr.
go_tool() {
  local pkg="$1" version="$2" name dir tmp
  name="${pkg##*/}"
  dir="$(go_tools_dir)/$name@$version"
  if [[ ! -x "$dir/$name" ]]; then
    if ! command -v go >/dev/null 2>&1; then
      echo "go is not installed (https://go.dev/doc/install); it is needed to build $pkg@$version" >&2
      return 1
    fi
    echo "installing $pkg@$version into $dir" >&2
    mkdir -p "$(dirname "$dir")"
    # Into a temporary directory first, then renamed: a concurrent run never sees
    # a half-written binary.
    tmp="$(mktemp -d "$(dirname "$dir")/.$name.XXXXXX")"
    if ! (cd "$tmp" && GOBIN="$tmp" go install "$pkg@$version") >&2; then
      rm -rf "$tmp"
      echo "cannot install $pkg@$version (it needs the Go module proxy, GOPROXY)" >&2
      return 1
    fi
    if ! mv -T "$tmp" "$dir" 2>/dev/null; then
      rm -rf "$tmp" # another run installed it first
    fi
  fi
  printf '%s\n' "$dir/$name"
}
