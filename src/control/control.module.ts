/** ControlModule: negotiation, role tokens, the endpoint profile, the gate guards. */
import { Module } from '@nestjs/common';
import { ProjectsModule } from '../projects/projects.module';
import { AuthTokensService } from './auth-tokens.service';
import { ControlEndpointProfile } from './control-endpoint.profile';
import { ControlGateway } from './control.gateway';

@Module({
  imports: [ProjectsModule],
  providers: [AuthTokensService, ControlEndpointProfile, ControlGateway],
  exports: [AuthTokensService, ControlEndpointProfile],
})
export class ControlModule {}
