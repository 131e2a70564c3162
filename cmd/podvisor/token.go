package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cluster/bootstrap"
)

type tokenOptions struct {
	dataDir, kubeconfig, description string
	ttl                              time.Duration
	printJoin                        bool
}

// tokenFlags defines token VERB's flags into o.
func tokenFlags(verb string, o *tokenOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("podvisor token "+verb, flag.ContinueOnError)
	fs.StringVar(&o.dataDir, "data-dir", datadir.Default(), "data directory of the podvisor server (its admin.kubeconfig is used)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "an administrator's kubeconfig instead of the data dir's")
	fs.DurationVar(&o.ttl, "ttl", 24*time.Hour, "how long the token is valid (0: forever)")
	fs.StringVar(&o.description, "description", "", "what the token is for")
	fs.BoolVar(&o.printJoin, "print-join-command", false, "print the whole 'podvisor agent' command line that joins with the token")
	return fs
}

func runToken(args []string) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "list") {
		return fmt.Errorf("usage: podvisor token create [--ttl 24h] [--print-join-command] | podvisor token list")
	}
	var o tokenOptions
	fs := tokenFlags(args[0], &o)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	dataDir, kubeconfig, ttl, description, printJoin := &o.dataDir, &o.kubeconfig, &o.ttl, &o.description, &o.printJoin
	if *kubeconfig == "" {
		*kubeconfig = datadir.AdminKubeconfig(*dataDir)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if args[0] == "list" {
		return listTokens(ctx, c)
	}
	tok, _, err := bootstrap.CreateToken(ctx, c, *ttl, *description)
	if err != nil {
		return err
	}
	if !*printJoin {
		fmt.Println(tok)
		return nil
	}
	cm, err := c.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("kube-public/cluster-info: %w", err)
	}
	info, err := clientcmd.Load([]byte(cm.Data[bootstrapapi.KubeConfigKey]))
	if err != nil {
		return fmt.Errorf("kube-public/cluster-info: %w", err)
	}
	for _, cl := range info.Clusters {
		certs, err := bootstrap.ParseCerts(cl.CertificateAuthorityData)
		if err != nil {
			return fmt.Errorf("kube-public/cluster-info's CA: %w", err)
		}
		fmt.Printf("podvisor agent --server %s --token %s --ca-cert-hash %s\n", cl.Server, tok, bootstrap.CAHash(certs[0]))
		return nil
	}
	return fmt.Errorf("kube-public/cluster-info names no cluster")
}

func listTokens(ctx context.Context, c kubernetes.Interface) error {
	secrets, err := c.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(bootstrapapi.SecretTypeBootstrapToken)})
	if err != nil {
		return err
	}
	sort.Slice(secrets.Items, func(i, j int) bool { return secrets.Items[i].Name < secrets.Items[j].Name })
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOKEN ID\tEXPIRES\tDESCRIPTION")
	for _, s := range secrets.Items {
		exp := string(s.Data[bootstrapapi.BootstrapTokenExpirationKey])
		if exp == "" {
			exp = "<never>"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", s.Data[bootstrapapi.BootstrapTokenIDKey], exp, s.Data[bootstrapapi.BootstrapTokenDescriptionKey])
	}
	return w.Flush()
}
