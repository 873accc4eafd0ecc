/** AcheronModule: the runtime session (negotiation; the namespace comes later). */
import { Module } from '@nestjs/common';
import { AcheronGateway } from './acheron.gateway';

@Module({ providers: [AcheronGateway] })
export class AcheronModule {}
