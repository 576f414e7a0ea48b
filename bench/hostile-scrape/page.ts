/**
 * A valid vLLM `/metrics` page of about `bytes`: the load gauges, then histogram buckets of a
 * series the sidecar does not read (what most of a real page is) up to the size, then the
 * inter-token latency histogram last, so that reading it needs the whole page.
 */
export function metricsPage(bytes: number): Buffer {
  const head = [
    '# HELP vllm:num_requests_running Number of requests in model execution batches.',
    '# TYPE vllm:num_requests_running gauge',
    'vllm:num_requests_running{engine="0",model_name="m"} 1',
    'vllm:num_requests_waiting{engine="0",model_name="m"} 0',
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25',
    '# TYPE vllm:e2e_request_latency_seconds histogram',
  ].join('\n');
  const tail = [
    'vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 2.0',
    'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 100',
    '',
  ].join('\n');
  const lines: string[] = [head];
  let size = head.length + tail.length + 1;
  for (let i = 0; ; i++) {
    const line = `vllm:e2e_request_latency_seconds_bucket{engine="0",le="${i}.5",model_name="m"} ${i}`;
    if (size + line.length + 1 > bytes) break;
    lines.push(line);
    size += line.length + 1;
  }
  lines.push(tail);
  return Buffer.from(lines.join('\n'));
}
