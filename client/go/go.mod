// Module-mode equivalent of the GOPATH build that test.sh runs offline against
// Debian bookworm's Go packages. test.sh does not use this file
// (GO111MODULE=off), and go.sum is not committed: run `go mod tidy` once with
// access to the module proxy to create it.
module github.com/ctxwarden/ctxwarden/client/go

go 1.19

require (
	// Debian's golang-google-genproto-dev is the 2020-04-13 snapshot; grpc
	// v1.33.3 itself requires this later one, so module mode selects it.
	google.golang.org/genproto v0.0.0-20200526211855-cb27e3aa2013
	// golang-google-grpc-dev 1.33.3
	google.golang.org/grpc v1.33.3
	// golang-google-protobuf-dev 1.28.1 (protoc-gen-go v1.28.1 generated ctxwardenv1)
	google.golang.org/protobuf v1.28.1
)

require (
	// golang-github-golang-protobuf-1-5-dev 1.5.2 (grpc-go marshals through it)
	github.com/golang/protobuf v1.5.2 // indirect
	// golang-golang-x-net-dev 0.7.0
	golang.org/x/net v0.7.0 // indirect
	// golang.org/x/net v0.7.0 requires x/sys v0.5.0 (Debian ships 0.3.0)
	golang.org/x/sys v0.5.0 // indirect
	// golang-golang-x-text-dev 0.7.0
	golang.org/x/text v0.7.0 // indirect
)
