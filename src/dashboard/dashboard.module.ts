/**
 * DashboardModule: the admin web dashboard under `/ui/` on the `svc`
 * WebSocket port. main.ts hands {@link DashboardHttp} to the envelope adapter as its
 * HttpExtension; the dashboard itself speaks the control protocol over the WebSocket.
 */
import { Module } from '@nestjs/common';
import { ControlModule } from '../control/control.module';
import { DashboardHttp } from './dashboard.http';
import { UiSessionsService } from './ui-sessions.service';

@Module({
  imports: [ControlModule],
  providers: [UiSessionsService, DashboardHttp],
  exports: [DashboardHttp],
})
export class DashboardModule {}
