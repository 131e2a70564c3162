package images

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
)

// testserverBinary is the testserver program of ./testserver.
func testserverBinary() ([]byte, error) { return program("testserver") }

var programs sync.Map // directory → func() ([]byte, error), one build each

// program compiles the Go program in the named directory of this package
// once per process: static, stripped and reproducible, so an image holding
// it changes ID only when the program does.
func program(dir string) ([]byte, error) {
	return once(&programs, dir, func() ([]byte, error) { return buildProgram(dir) })
}

func buildProgram(dir string) ([]byte, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("cannot find the source of %s", dir)
	}
	tmp, err := os.MkdirTemp("", dir+"-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, dir)
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = filepath.Join(filepath.Dir(self), dir)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %v: %s", dir, err, msg)
	}
	return os.ReadFile(out)
}

func withStopSignal(c *imagebuild.Config)  { c.StopSignal = "SIGUSR1" }
func withNonRootUser(c *imagebuild.Config) { c.User = "1000:1000" }

// testserver is the testserver program alone, with "pause" as its default
// command so that a container without args runs until stopped.
func testserver(name string, variant func(*imagebuild.Config)) (imagebuild.Image, error) {
	bin, err := testserverBinary()
	if err != nil {
		return imagebuild.Image{}, err
	}
	im := imagebuild.Image{
		Names: []string{name},
		Config: imagebuild.Config{
			Entrypoint:   []string{"/testserver"},
			Cmd:          []string{"pause"},
			ExposedPorts: []string{"8080/tcp"},
		},
		Files: []imagebuild.File{
			imagebuild.Regular("/testserver", 0o755, bin),
			imagebuild.Dir("/tmp", os.ModeSticky|0o777),
		},
	}
	if variant != nil {
		variant(&im.Config)
	}
	return im, nil
}
