# Sourced by the scripts that build Go programs from the Go module proxy (scripts/setup.sh for
# helm, scripts/go-tool-build.sh for the test servers): the compiler's settings, in one place.
#
# No debug information (-dwarf=false, and the linker's -s -w): nothing here is ever debugged,
# and the compiler's DWARF alone is about a seventh of a cold build's CPU (etcd: 55 against
# 47 CPU-seconds). The test servers (etcd, kube-apiserver, Jaeger) are built without the
# compiler's optimisations as well (-N -l): the tests send them a few requests each, and a cold
# build of etcd takes 47 CPU-seconds so against 70 optimised. All of them with the same flags,
# so that the packages they share (the standard library first) are compiled once.
go_build_flags=(-trimpath "-ldflags=-s -w")
go_gcflags_optimised='all=-dwarf=false'
go_gcflags_test_server='all=-N -l -dwarf=false'
