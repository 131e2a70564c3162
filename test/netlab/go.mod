module github.com/podvisor/podvisor/test/netlab

go 1.26.8
