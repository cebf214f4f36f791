// Package gpusched is the Go client of gpusched-server, the stateless gRPC GPU placement
// service.
//
// A Client wraps the generated stubs of package gpuschedv1 (imported here as v1): requests and
// responses are the generated messages, errors are *Error with the gRPC code and the
// google.rpc.BadRequest field violations the server attaches to INVALID_ARGUMENT.
//
//	client, err := gpusched.Dial(ctx, "127.0.0.1:50051",
//		gpusched.WithTimeout(5*time.Second),
//		gpusched.WithTLSFiles("ca.pem", "client.pem", "client-key.pem"),
//		gpusched.WithOpenTelemetry())
//	if err != nil { ... }
//	defer client.Close()
//
//	pod := gpusched.NewPod("ml", "trainer-0").
//		Annotate(gpusched.AnnotationGPUSchedulerPolicy, "spread").
//		Container("trainer", gpusched.GPULimits(2).MemMiB(16000)).
//		Build()
//	resp, err := client.Allocate(ctx, &v1.AllocateRequest{Nodes: nodes, Workload: pod})
//	if gpusched.IsInvalidArgument(err) {
//		for _, v := range gpusched.FieldViolations(err) { ... }
//	}
//
// A workload that fits nowhere is not an error: the answer says Placed false and lists every
// failed node with typed reasons.
package gpusched
