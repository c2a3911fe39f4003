// Package pb holds the protocol of warren's guest agent: Connect-RPC services
// defined in the .proto files beside this file, and the Go code generated from
// them (regenerate with `go generate ./internal/agent/pb` after changing a
// .proto; needs protoc, protoc-gen-go and protoc-gen-connect-go).
package pb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --connect-go_out=. --connect-go_opt=paths=source_relative process/process.proto filesystem/filesystem.proto control/control.proto
