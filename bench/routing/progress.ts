/**
 * A progress bar on stderr while the benchmark runs: one redrawn line on a terminal, plain lines
 * (one per finished run) when stderr is not one.
 */
export class Progress {
  readonly #quiet: boolean;
  readonly #tty = process.stderr.isTTY === true;
  #label = '';
  #run = 0;
  #runs = 0;
  #total = 0;
  #lastDraw = 0;

  constructor(quiet: boolean) {
    this.#quiet = quiet;
  }

  line(text: string): void {
    if (this.#quiet) return;
    if (this.#tty) process.stderr.write('\r\x1b[2K');
    process.stderr.write(`${text}\n`);
  }

  start(label: string, run: number, runs: number, total: number): void {
    this.#label = label;
    this.#run = run;
    this.#runs = runs;
    this.#total = total;
    this.update(0);
  }

  update(done: number): void {
    if (this.#quiet || !this.#tty) return;
    const now = performance.now();
    if (done < this.#total && now - this.#lastDraw < 100) return;
    this.#lastDraw = now;
    const width = 30;
    const filled = this.#total === 0 ? width : Math.round((done / this.#total) * width);
    const bar = '█'.repeat(filled) + '░'.repeat(width - filled);
    process.stderr.write(
      `\r\x1b[2Krun ${this.#run}/${this.#runs} ${this.#label} ${bar} ${done}/${this.#total}`,
    );
  }

  done(summary: string): void {
    this.line(`run ${this.#run}/${this.#runs} ${summary}`);
  }
}
