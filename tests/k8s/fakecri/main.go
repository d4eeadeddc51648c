// Command fakecri serves the fake CRI runtime and image services of
// k8s.io/cri-client/pkg/fake on a unix socket, for the real kubelet in
// tests/e2e/test_kubelet.py. Containers are never run: the fake records them
// and reports them running. Each CreateContainer request kubelet sends is
// also appended to the --dump file as one line of protojson, so that the test
// can read the environment, mounts, devices and CDI devices kubelet gave the
// container. It stops on SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

// runtime is the fake runtime with CreateContainer recorded first.
type runtime struct {
	*fake.RemoteRuntime
	mu   sync.Mutex
	dump *os.File
}

func (r *runtime) CreateContainer(ctx context.Context,
	req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	line, err := protojson.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("fakecri: recording CreateContainer: %w", err)
	}
	r.mu.Lock()
	_, err = r.dump.Write(append(line, '\n'))
	r.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("fakecri: writing %s: %w", r.dump.Name(), err)
	}
	return r.RemoteRuntime.CreateContainer(ctx, req)
}

func main() {
	listen := flag.String("listen", "", "unix socket to serve the CRI on (path)")
	dump := flag.String("dump", "", "file the CreateContainer requests are appended to")
	flag.Parse()
	if *listen == "" || *dump == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: fakecri --listen SOCKET --dump FILE")
		os.Exit(2)
	}
	f, err := os.OpenFile(*dump, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakecri: --dump %s: %v\n", *dump, err)
		os.Exit(1)
	}
	r := &runtime{RemoteRuntime: fake.NewFakeRemoteRuntime(), dump: f}
	// kubelet refuses an image whose size is 0 ("Id or size of image ... is
	// not set"), what the fake reports unless told otherwise.
	r.ImageService.SetFakeImageSize(1 << 20)
	r.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	r.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{
		CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS,
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, r)
	runtimeapi.RegisterImageServiceServer(srv, r)
	l, err := util.CreateListener("unix://" + *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakecri: --listen %s: %v\n", *listen, err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		srv.Stop()
	}()
	fmt.Printf("fakecri: serving on %s, recording to %s\n", *listen, *dump)
	if err := srv.Serve(l); err != nil {
		fmt.Fprintf(os.Stderr, "fakecri: %v\n", err)
		os.Exit(1)
	}
}
