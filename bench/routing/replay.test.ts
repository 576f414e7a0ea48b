import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { servedBy } from './replay.ts';

const byPort = new Map([
  [9101, 'b0'],
  [9102, 'b1'],
]);
const chunk = (id: string): string =>
  `data: {"id":"${id}","object":"chat.completion.chunk","created":0,"model":"bench-model"}`;

describe('servedBy', () => {
  it('reads the simulator’s header, as proxies pass it on', () => {
    assert.equal(servedBy({ 'x-sim-backend': 'b1' }, chunk('chatcmpl-sim9101-1'), byPort), 'b1');
  });

  it('reads LiteLLM’s renamed copy of the header', () => {
    assert.equal(servedBy({ 'llm_provider-x-sim-backend': 'b0' }, '', byPort), 'b0');
  });

  it('falls back to the port in the simulator’s chunk id', () => {
    assert.equal(servedBy({}, chunk('chatcmpl-sim9102-17'), byPort), 'b1');
    assert.equal(servedBy({}, chunk('cmpl-sim9101-3'), byPort), 'b0');
  });

  it('says nothing when neither tells', () => {
    assert.equal(servedBy({}, chunk('chatcmpl-abc'), byPort), undefined);
    assert.equal(servedBy({}, chunk('chatcmpl-sim9999-1'), byPort), undefined);
    assert.equal(servedBy({ 'x-sim-backend': '' }, '', byPort), undefined);
  });
});
