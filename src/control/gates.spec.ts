import 'reflect-metadata';
import { MESSAGE_METADATA } from '@nestjs/websockets/constants';
import { PROTECTED_OPERATIONS } from '@svc/protocol';
import { CatalogGateway } from '../catalog/catalog.gateway';
import { ProjectsGateway } from '../projects/projects.gateway';
import { ControlGateway } from './control.gateway';

/** The client-side list of protected operations must equal the handlers marked @Protected(). */
it('PROTECTED_OPERATIONS matches the @Protected() handlers', () => {
  const marked: string[] = [];
  for (const gw of [ControlGateway, ProjectsGateway, CatalogGateway]) {
    for (const name of Object.getOwnPropertyNames(gw.prototype)) {
      const fn: unknown = Object.getOwnPropertyDescriptor(gw.prototype, name)?.value;
      if (typeof fn !== 'function') continue;
      const type: unknown = Reflect.getMetadata(MESSAGE_METADATA, fn);
      if (typeof type === 'string' && Reflect.getMetadata('svc:gate:operator', fn)) marked.push(type);
    }
  }
  expect(marked.sort()).toEqual([...PROTECTED_OPERATIONS].sort());
});
