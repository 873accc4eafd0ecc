/**
 * A reply payload that is already JSON text. A handler returns one when it keeps the
 * encoded form of a large, rarely changing payload (e.g. `control.workspace_status` of a
 * project with thousands of mounts), so the adapter splices the text into the envelope
 * instead of encoding the same objects again for every request.
 */
export class EncodedJson {
  /** @param json a complete JSON value (normally an object); not checked */
  constructor(readonly json: string) {}

  /** Generic serialisers (logs, tests) still see the value itself. */
  toJSON(): unknown {
    return JSON.parse(this.json);
  }
}
