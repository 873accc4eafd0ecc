/** What the command-line programs (`svc-control`, `svc-fs-mount`) write, and their exit code. */
import { Injectable } from '@nestjs/common';

/** Writes results to stdout, errors to stderr, and sets the process exit code. */
@Injectable()
export class CliOutput {
  /** One JSON document on stdout, indented by two spaces. */
  json(value: unknown): void {
    process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
  }

  /** One line on stdout. */
  line(text: string): void {
    process.stdout.write(`${text}\n`);
  }

  /** One line on stderr, and `code` as the exit code of the process (it keeps running). */
  fail(message: string, code: number): void {
    process.stderr.write(`${message}\n`);
    process.exitCode = code;
  }
}
