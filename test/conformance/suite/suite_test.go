package suite

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"
	commontest "k8s.io/kubernetes/test/e2e/common"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// Fixes the feature and label constants before any spec names them.
	_ "k8s.io/kubernetes/test/e2e/feature"

	// The specs: sig-node only.
	_ "k8s.io/kubernetes/test/e2e/common/node"
	_ "k8s.io/kubernetes/test/e2e/node"

	// Framework extensions upstream's suite installs: dumps of the
	// namespace on failure, and a check after each spec that the node is
	// still Ready.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"

	// Logging flags (-v) on the command line, as upstream.
	_ "k8s.io/component-base/logs/testinit"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown arguments: %v\n", flag.Args())
		os.Exit(2)
	}
	// Manifests and fixtures some specs read, from the binary itself: the
	// runner has no kubernetes source tree.
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	// As upstream: InitLogs turns contextual logging off; the framework wants it on.
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "podvisor sig-node conformance", suiteConfig, reporterConfig)
}

// A single node with no cluster add-ons: upstream's setupSuite also waits
// for kube-system pods and daemonsets and deletes stray namespaces; podvisor
// runs none of those, and the runner starts from an empty data dir. What is
// kept: the node must be schedulable, and NumNodes is counted from it.
var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	commontest.CurrentSuite = commontest.E2E
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "loading the client")
	timeouts := framework.NewTimeoutContext()
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, timeouts.NodeSchedulable))
	if v, err := c.Discovery().ServerVersion(); err == nil {
		framework.Logf("kube-apiserver version: %s", v.GitVersion)
	}
	return nil
}, func(ctx context.Context, _ []byte) {
	commontest.CurrentSuite = commontest.E2E
	if framework.TestContext.CloudConfig.NumNodes == framework.DefaultNumNodes {
		c, err := framework.LoadClientset()
		framework.ExpectNoError(err, "loading the client")
		nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
		framework.ExpectNoError(err)
		framework.TestContext.CloudConfig.NumNodes = len(nodes.Items)
	}
})
