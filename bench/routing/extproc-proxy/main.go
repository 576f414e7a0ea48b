// extproc-proxy: the benchmark's stand-in for Envoy in front of a GAIE endpoint picker (EPP).
//
// For every HTTP request it opens one ext_proc stream to the EPP and plays Envoy's part with the
// processing mode GAIE's manifests configure (request and response bodies FULL_DUPLEX_STREAMED,
// headers sent): request headers, then the body as it arrives, the last chunk with
// end_of_stream; it reads the endpoint the EPP picked (dynamic metadata
// envoy.lb/x-gateway-destination-endpoint, else the header of that name), forwards the body the
// EPP handed back to that endpoint, then passes the response headers and every response body
// chunk through the EPP and on to the client as the EPP returns them, so streamed tokens arrive
// as they are produced. No endpoint, or a failed stream before one was picked: 503 with an
// OpenAI-style error. It does not retry, does not fail over to the EPP's fallback endpoints,
// keeps Go's default connection pooling (not Envoy's), and talks plaintext gRPC.
//
// It answers with the header x-gateway-destination-endpoint-served naming the endpoint that
// served (the bench waits on it until every backend has been picked once).
//
// It is switchyard's own code; scripts/gaie/build-epp.sh builds it beside GAIE's picker because
// it needs the go-control-plane ext_proc types at the version the EPP module pins.
//
//	extproc-proxy --listen 127.0.0.1:8080 --epp 127.0.0.1:9002
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmode "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	lbNamespace     = "envoy.lb"
	destinationKey  = "x-gateway-destination-endpoint"
	servedKey       = "x-gateway-destination-endpoint-served"
	maxChunk        = 64 * 1024
	upstreamTimeout = 10 * time.Minute
)

type proxy struct {
	epp      extproc.ExternalProcessorClient
	upstream *http.Client
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve HTTP on")
	eppAddr := flag.String("epp", "127.0.0.1:9002", "the EPP's ext_proc gRPC address (plaintext)")
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println("extproc-proxy version 1")
		return
	}
	conn, err := grpc.NewClient(*eppAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatalf("extproc-proxy: cannot dial the EPP at %s: %v", *eppAddr, err)
	}
	p := &proxy{
		epp: extproc.NewExternalProcessorClient(conn),
		upstream: &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}},
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("extproc-proxy: cannot listen on %s: %v", *listen, err)
	}
	log.Printf("extproc-proxy: listening on %s, EPP at %s", ln.Addr(), *eppAddr)
	log.Fatal(http.Serve(ln, p))
}

func fail(w http.ResponseWriter, status int, kind, message string) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": message, "type": kind, "code": status},
	})
}

func headerMap(pseudo [][2]string, h http.Header) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for _, kv := range pseudo {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[0], RawValue: []byte(kv[1])})
	}
	for k, vs := range h {
		for _, v := range vs {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
		}
	}
	return m
}

func headerValue(h *corev3.HeaderValue) string {
	if len(h.RawValue) > 0 {
		return string(h.RawValue)
	}
	return h.Value
}

// applyMutation sets the EPP's headers on h, as Envoy applies a header mutation (pseudo-headers
// and the picker's routing headers are not forwarded as ordinary headers).
func applyMutation(h http.Header, c *extproc.CommonResponse) {
	if c == nil || c.HeaderMutation == nil {
		return
	}
	for _, o := range c.HeaderMutation.SetHeaders {
		if o.Header == nil || strings.HasPrefix(o.Header.Key, ":") {
			continue
		}
		h.Set(o.Header.Key, headerValue(o.Header))
	}
	for _, k := range c.HeaderMutation.RemoveHeaders {
		h.Del(k)
	}
}

// destination reads the picked endpoint: the dynamic metadata first (what GAIE's gateways
// route on), the header second; of a comma-separated list the first (no fallbacks here).
func destination(r *extproc.ProcessingResponse) string {
	if md := r.GetDynamicMetadata(); md != nil {
		if lb := md.Fields[lbNamespace].GetStructValue(); lb != nil {
			if v := lb.Fields[destinationKey].GetStringValue(); v != "" {
				return strings.TrimSpace(strings.Split(v, ",")[0])
			}
		}
	}
	for _, o := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.Header != nil && strings.EqualFold(o.Header.Key, destinationKey) {
			return strings.TrimSpace(strings.Split(headerValue(o.Header), ",")[0])
		}
	}
	return ""
}

func streamedBody(c *extproc.CommonResponse, original []byte) ([]byte, bool) {
	if c == nil || c.BodyMutation == nil {
		return original, false
	}
	switch m := c.BodyMutation.Mutation.(type) {
	case *extproc.BodyMutation_StreamedResponse:
		return m.StreamedResponse.Body, m.StreamedResponse.EndOfStream
	case *extproc.BodyMutation_Body:
		return m.Body, false
	case *extproc.BodyMutation_ClearBody:
		return nil, false
	}
	return original, false
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := p.epp.Process(ctx)
	if err != nil {
		fail(w, http.StatusServiceUnavailable, "service_unavailable", "the endpoint picker is unreachable: "+err.Error())
		return
	}
	hasBody := r.ContentLength != 0 && r.Method != http.MethodGet && r.Method != http.MethodHead
	pseudo := [][2]string{{":method", r.Method}, {":path", r.URL.RequestURI()}, {":authority", r.Host}, {":scheme", "http"}}
	first := &extproc.ProcessingRequest{
		Request: &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{
			Headers: headerMap(pseudo, r.Header), EndOfStream: !hasBody,
		}},
		ProtocolConfig: &extproc.ProtocolConfiguration{
			RequestBodyMode:  procmode.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: procmode.ProcessingMode_FULL_DUPLEX_STREAMED,
		},
	}
	if err := stream.Send(first); err != nil {
		fail(w, http.StatusServiceUnavailable, "service_unavailable", "the endpoint picker closed the stream: "+err.Error())
		return
	}
	// The request body goes out as it arrives, while the answers are read below (the EPP holds
	// its answer to the headers until the body is complete).
	sendErr := make(chan error, 1)
	if hasBody {
		go func() { sendErr <- sendBody(stream, r.Body) }()
	} else {
		sendErr <- nil
	}

	var target string
	reqHeaders := r.Header.Clone()
	var body []byte
	headersDone, bodyDone := false, !hasBody
	for !headersDone || !bodyDone {
		resp, err := stream.Recv()
		if err != nil {
			fail(w, http.StatusServiceUnavailable, "service_unavailable", "the endpoint picker picked no endpoint: "+err.Error())
			return
		}
		switch v := resp.Response.(type) {
		case *extproc.ProcessingResponse_RequestHeaders:
			headersDone = true
			target = destination(resp)
			applyMutation(reqHeaders, v.RequestHeaders.GetResponse())
		case *extproc.ProcessingResponse_RequestBody:
			chunk, eos := streamedBody(v.RequestBody.GetResponse(), nil)
			body = append(body, chunk...)
			bodyDone = eos
		case *extproc.ProcessingResponse_ImmediateResponse:
			ir := v.ImmediateResponse
			status := http.StatusServiceUnavailable
			if ir.GetStatus() != nil && ir.GetStatus().GetCode() != 0 {
				status = int(ir.GetStatus().GetCode())
			}
			applyMutation(w.Header(), &extproc.CommonResponse{HeaderMutation: ir.GetHeaders()})
			w.WriteHeader(status)
			_, _ = w.Write(ir.GetBody())
			return
		}
	}
	if err := <-sendErr; err != nil {
		fail(w, http.StatusBadRequest, "invalid_request_error", "reading the request body: "+err.Error())
		return
	}
	if target == "" {
		fail(w, http.StatusServiceUnavailable, "service_unavailable", "the endpoint picker picked no endpoint")
		return
	}
	reqHeaders.Del(destinationKey)
	reqHeaders.Del("X-Echo-Set-Header")
	reqHeaders.Del("Content-Length")

	upCtx, upCancel := context.WithTimeout(ctx, upstreamTimeout)
	defer upCancel()
	up, err := http.NewRequestWithContext(upCtx, r.Method, "http://"+target+r.URL.RequestURI(), strings.NewReader(string(body)))
	if err != nil {
		fail(w, http.StatusBadGateway, "bad_gateway", err.Error())
		return
	}
	up.Header = reqHeaders
	up.ContentLength = int64(len(body))
	res, err := p.upstream.Do(up)
	if err != nil {
		fail(w, http.StatusBadGateway, "bad_gateway", fmt.Sprintf("the picked endpoint %s failed: %v", target, err))
		return
	}
	defer res.Body.Close()
	p.respond(w, stream, res, target)
}

func sendBody(stream extproc.ExternalProcessor_ProcessClient, body io.Reader) error {
	buf := make([]byte, maxChunk)
	for {
		n, err := body.Read(buf)
		eos := errors.Is(err, io.EOF)
		if err != nil && !eos {
			return err
		}
		if n > 0 || eos {
			msg := &extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestBody{
				RequestBody: &extproc.HttpBody{Body: append([]byte(nil), buf[:n]...), EndOfStream: eos},
			}}
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		if eos {
			return nil
		}
	}
}

// respond passes the upstream's response through the EPP (headers, then every body chunk) and
// writes what the EPP returns to the client, flushing each chunk.
func (p *proxy) respond(w http.ResponseWriter, stream extproc.ExternalProcessor_ProcessClient, res *http.Response, target string) {
	served, _ := structpb.NewStruct(map[string]any{servedKey: target})
	hdrs := &extproc.ProcessingRequest{
		Request: &extproc.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extproc.HttpHeaders{
			Headers: headerMap([][2]string{{":status", fmt.Sprint(res.StatusCode)}}, res.Header),
		}},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{lbNamespace: served}},
	}
	if err := stream.Send(hdrs); err != nil {
		fail(w, http.StatusBadGateway, "bad_gateway", "the endpoint picker closed the stream: "+err.Error())
		return
	}
	resp, err := stream.Recv()
	if err != nil {
		fail(w, http.StatusBadGateway, "bad_gateway", "the endpoint picker failed on the response headers: "+err.Error())
		return
	}
	out := res.Header.Clone()
	applyMutation(out, resp.GetResponseHeaders().GetResponse())
	out.Del("Content-Length")           // the EPP may change the body
	out.Del("x-went-into-resp-headers") // the picker's debugging aid
	for k, vs := range out {
		w.Header()[k] = vs
	}
	// Which endpoint served, for the bench and the test (Envoy reports it only to the EPP; the
	// lwepp picker's conformance header is not in the full EPP's default configuration).
	w.Header().Set(servedKey, target)
	w.WriteHeader(res.StatusCode)
	flusher, _ := w.(http.Flusher)

	// The EPP's answers to the body chunks, written to the client as they come.
	written := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				written <- err
				return
			}
			chunk, eos := streamedBody(msg.GetResponseBody().GetResponse(), nil)
			if len(chunk) > 0 {
				if _, err := w.Write(chunk); err != nil {
					written <- err
					return
				}
				if flusher != nil {
					flusher.Flush()
				}
			}
			if eos {
				written <- nil
				return
			}
		}
	}()
	buf := make([]byte, maxChunk)
	for {
		n, err := res.Body.Read(buf)
		eos := err != nil
		if n > 0 || eos {
			msg := &extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_ResponseBody{
				ResponseBody: &extproc.HttpBody{Body: append([]byte(nil), buf[:n]...), EndOfStream: eos},
			}}
			if serr := stream.Send(msg); serr != nil {
				break
			}
		}
		if eos {
			break
		}
	}
	if err := <-written; err != nil {
		log.Printf("extproc-proxy: response to %s cut short: %v", target, err)
	}
	_ = stream.CloseSend()
}
