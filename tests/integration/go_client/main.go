// A Go client of cmestreamd built from Debian's Go packages (GOPATH mode, offline; see
// go_client_check.sh): creates a model, streams pairs of y = 0.5 x over the bidi Ingest RPC,
// refreshes, then checks the one-step prediction and the Koopman spectrum against that map.
//
//	goclient HOST:PORT
//
// Exit 0 when every check holds; otherwise the failed check on stderr and exit 1.
package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"time"

	cmestreamv1 "cmestream.dev/api/cmestream/v1"
	"google.golang.org/grpc"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "goclient: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: goclient HOST:PORT")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, os.Args[1], grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		fail("dial %s: %v", os.Args[1], err)
	}
	defer conn.Close()
	models := cmestreamv1.NewModelServiceClient(conn)
	ingest := cmestreamv1.NewIngestServiceClient(conn)
	queries := cmestreamv1.NewQueryServiceClient(conn)

	sigma := 0.5
	info, err := models.CreateModel(ctx, &cmestreamv1.CreateModelRequest{
		Config: &cmestreamv1.ModelConfig{Name: "go-client", Dim: 1, Sigma: &sigma}})
	if err != nil {
		fail("CreateModel: %v", err)
	}
	if info.GetConfig().GetDim() != 1 {
		fail("CreateModel: dim %d, expected 1", info.GetConfig().GetDim())
	}

	// 4 batches of 500 pairs x ~ U(-1, 1), y = 0.5 x, one producer with offsets.
	stream, err := ingest.Ingest(ctx)
	if err != nil {
		fail("Ingest: %v", err)
	}
	rng := rand.New(rand.NewSource(7))
	const batches, perBatch = 4, 500
	for b := 0; b < batches; b++ {
		batch := &cmestreamv1.IngestBatch{Model: "go-client", ProducerId: "go", Offset: uint64(b * perBatch)}
		for i := 0; i < perBatch; i++ {
			x := rng.Float64()*2 - 1
			batch.X = append(batch.X, x)
			batch.Y = append(batch.Y, 0.5*x)
		}
		if err := stream.Send(batch); err != nil {
			fail("Ingest send: %v", err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		fail("Ingest close: %v", err)
	}
	var acks, applied, samples uint64
	for {
		ack, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail("Ingest recv: %v", err)
		}
		acks++
		applied += ack.GetPairsApplied()
		samples = ack.GetModelSamples()
	}
	if acks != batches || applied != batches*perBatch || samples != batches*perBatch {
		fail("Ingest: %d acks, %d pairs applied, %d samples; expected %d, %d, %d", acks, applied, samples,
			batches, batches*perBatch, batches*perBatch)
	}

	view, err := queries.Refresh(ctx, &cmestreamv1.RefreshRequest{Model: "go-client", Wait: true, TimeoutSeconds: 30})
	if err != nil {
		fail("Refresh: %v", err)
	}
	pred, err := queries.Predict(ctx, &cmestreamv1.PredictRequest{Model: "go-client", Points: []float64{-0.4, 0.2, 0.6}})
	if err != nil {
		fail("Predict: %v", err)
	}
	want := []float64{-0.2, 0.1, 0.3}
	got := pred.GetPredictions()
	if len(got) != len(want) {
		fail("Predict: %d predictions, expected %d", len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 0.05 {
			fail("Predict: E[Y|X=%g] = %g, expected %g +- 0.05 (y = 0.5 x)", []float64{-0.4, 0.2, 0.6}[i], got[i], want[i])
		}
	}
	k, err := queries.GetKoopman(ctx, &cmestreamv1.KoopmanRequest{Model: "go-client", Top: 3})
	if err != nil {
		fail("GetKoopman: %v", err)
	}
	if len(k.GetEigenvalues()) == 0 {
		fail("GetKoopman: no eigenvalues")
	}
	for _, mu := range k.GetEigenvalues() {
		if math.Hypot(mu.GetRe(), mu.GetIm()) > 1.05 {
			fail("GetKoopman: |mu| = %g > 1.05 for a contraction", math.Hypot(mu.GetRe(), mu.GetIm()))
		}
	}
	fmt.Printf("goclient: ok: %d pairs in %d batches, view %d, predictions %.3f %.3f %.3f, %d eigenvalues (|mu_1| = %.3f)\n",
		applied, acks, view.GetView().GetVersion(), got[0], got[1], got[2], len(k.GetEigenvalues()),
		math.Hypot(k.GetEigenvalues()[0].GetRe(), k.GetEigenvalues()[0].GetIm()))
}
