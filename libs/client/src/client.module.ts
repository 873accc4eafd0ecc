/**
 * ClientModule: the protocol clients as injectable providers, so CLI commands receive them by
 * injection (nest-commander CLIs from the same DI container).
 */
import { Injectable, Module } from '@nestjs/common';
import { ControlClient, ControlClientOptions } from './control-client';

/** Opens control sessions (see {@link ControlClient.connect}). */
@Injectable()
export class ControlClientFactory {
  connect(options: ControlClientOptions): Promise<ControlClient> {
    return ControlClient.connect(options);
  }
}

@Module({ providers: [ControlClientFactory], exports: [ControlClientFactory] })
export class ClientModule {}
